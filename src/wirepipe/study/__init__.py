"""The study, built on the engine: which format, codec and level suits one's records, and what it takes to run it.

``bench`` measures every format x codec x level over the records (in process and over NATS), ``report`` turns
results and run metrics into tables, plots and a recommendation, ``plan`` sizes the cores, workers and wire a
rate needs. They use pipelines, operators and connectors as a user does; nothing of the engine imports them.
"""
