"""Metrics: the recorder that stamps every stage of every batch into Parquet (``recorder``); ``wirepipe report``
reads what it writes."""
