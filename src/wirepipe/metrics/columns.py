"""The metrics tables: every column, its Arrow type and what it means, in one place.

A column is ``name: (Arrow type, meaning)``. The recorder writes stage rows
(``STAGE_COLUMNS``) and latency rows (``LATENCY_COLUMNS``); ``wirepipe bench`` writes stage
rows with what it measured (``BENCH_COLUMNS`` after them); ``wirepipe report``, a Beam
replay's results and the README's column tables (a test compares them) take them from
here. A file says which table it holds in its ``TABLE_KEY`` metadata (``stages`` or
``latency``).
"""

from __future__ import annotations

from typing import Any

Columns = dict[str, tuple[str, str]]

STAGE_COLUMNS: Columns = {
    "run_id": ("string", "id of the run: `<UTC start>-<random>`, the same in every row of one run"),
    "pipeline": ("string", "pipeline name"),
    "batch": ("int64", "index of the batch in the run, from 0 (joins the latency rows)"),
    "step": ("int32", "position of the stage in the pipeline: 0 is the source, the highest is the sink"),
    "stage": ("string", "stage kind: generate/read/consume, serialize, compress, decompress, deserialize, "
                        "map/filter/select, write/publish"),
    "operator": ("string", "the operator as a chain step (`msgpack`, `zstd:fastest`, `auto`) or the connector"),
    "params": ("string", "the operator's parameters as JSON"),
    "records": ("int64", "records that left the stage"),
    "rejected": ("int64", "records the stage sent to the dead-letter destination"),
    "bytes_in": ("int64", "payload bytes entering the stage; for `serialize`, the declared raw size of the "
                          "records (null when the source does not know it)"),
    "bytes_out": ("int64", "payload bytes leaving the stage (null while values are objects)"),
    "start_ns": ("int64", "stage start, `time.monotonic_ns()` of the worker (see `wirepipe.clock`)"),
    "end_ns": ("int64", "stage end, `time.monotonic_ns()`; the stage took `end_ns - start_ns`"),
    "lost": ("int64", "source row only: messages the source found lost since the previous batch (core NATS: "
                      "Wirepipe-Seq gaps, client drops; see README, Delivery); null on other rows"),
    "redelivered": ("int64", "source row only: records of the batch delivered before (JetStream: a lost ack, a "
                             "dead worker; every duplicate written is among them); null on other rows and "
                             "for sources that do not redeliver"),
    "reasons": ("map<string, int64>", "the stage's `rejected` by reason (the error without its values, as the run "
                                      "summary groups them: `rejections.reason_of`); null when it rejected none"),
    "projected": ("int64", "records whose fields the schema does not declare the stage dropped (`serialize` with "
                           "`extra_fields: drop`)"),
}

LATENCY_COLUMNS: Columns = {
    "run_id": ("string", "id of the run"),
    "batch": ("int64", "batch index: joins the stage rows of the same run"),
    "seq": ("int64", "record sequence from the source (null if the source has none)"),
    "stream_seq": ("int64", "JetStream stream sequence (null on core NATS)"),
    "sent_ns": ("int64", "`Wirepipe-Sent-At`: publish time, ns since the Unix epoch, publisher's clock "
                         "(null when the header was absent)"),
    "received_ns": ("int64", "when the consumer received the record, ns since the Unix epoch"),
    "done_ns": ("int64", "end of the batch's last stage (the sink write), ns since the Unix epoch"),
}

BENCH_COLUMNS: Columns = {
    "label": ("string", "what the rows measured, `<dataset>: <chain>` (the report groups by it)"),
    "dataset": ("string", "the dataset or input file the records came from"),
    "chain": ("string", "the combination measured: `format|codec:level`, with ` +dict` (a trained zstd "
                        "dictionary) and ` xN/msg` (N records a message)"),
    "iteration": ("int64", "the repetition, from 0 (`batch` holds it too)"),
    "payload_digest": ("string", "on `serialize` rows, a digest of the serialized payloads: equal digests are "
                                 "the same bytes; null on other rows"),
}

TABLES: dict[str, Columns] = {"stages": STAGE_COLUMNS, "latency": LATENCY_COLUMNS}
TABLE_KEY = "wirepipe.table"


def arrow_schema(columns: Columns, metadata: dict[str, str] | None = None) -> Any:
    """The Arrow schema of ``columns``, with ``metadata`` (the file's key-value metadata)."""
    import pyarrow as pa

    def arrow_type(kind: str) -> Any:
        if kind.startswith("map<"):
            key, value = kind[4:-1].split(",")
            return pa.map_(arrow_type(key.strip()), arrow_type(value.strip()))
        return getattr(pa, kind)()

    return pa.schema([pa.field(name, arrow_type(kind)) for name, (kind, _) in columns.items()], metadata=metadata)


def table_schema(table: str, metadata: dict[str, str] | None = None) -> Any:
    """The schema of ``table`` (``stages`` or ``latency``), its metadata saying which table it is."""
    return arrow_schema(TABLES[table], {**(metadata or {}), TABLE_KEY: table})


def bench_schema(metadata: dict[str, str] | None = None) -> Any:
    """The schema of ``wirepipe bench``'s rows: the stage columns, then what the bench measured."""
    return arrow_schema({**STAGE_COLUMNS, **BENCH_COLUMNS}, {**(metadata or {}), TABLE_KEY: "stages"})
