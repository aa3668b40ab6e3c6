"""Metrics: the recorder that stamps every stage of every batch into Parquet (``recorder``), the columns of
what it writes (``columns``), read back by ``wirepipe report``; OpenTelemetry spans of the batches (``tracing``)."""
