"""The metrics operator: one row per stage per batch, written to Parquet in row groups.

The run loop calls ``stamp`` around every stage (source, each operator, sink) with
monotonic nanoseconds; rows are buffered as plain Python columns and written as a
Parquet row group every ``row_group_rows`` rows and on close, so the file is valid
after any clean stop. Run metadata (run id, pipeline, config, versions, host) goes in
the Parquet key-value metadata of every file.

Columns: see ``SCHEMA_DOC`` (also in the README).
"""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from pathlib import Path
from typing import Any

SCHEMA_DOC: dict[str, str] = {
    "run_id": "unique id of the run (same for every row of one run)",
    "pipeline": "pipeline name",
    "batch": "index of the batch in the run, from 0",
    "stage": "stage kind: generate/read/consume, serialize, compress, decompress, deserialize, map, publish/write ...",
    "operator": "the operator as a chain step, e.g. msgpack, zstd:3, or the connector type",
    "params": "the operator's parameters as JSON",
    "records": "records that left the stage",
    "rejected": "records the stage sent to the dead-letter destination",
    "bytes_in": "payload bytes entering the stage (declared raw size before serialize; null if unknown)",
    "bytes_out": "payload bytes leaving the stage (null while values are objects)",
    "start_ns": "stage start, time.monotonic_ns()",
    "end_ns": "stage end, time.monotonic_ns()",
}

_LIBRARIES = ("nats-py", "msgpack", "zstandard", "pyarrow", "orjson", "cbor2", "brotli", "lz4")


def run_metadata(pipeline: str, config: dict[str, Any] | None, run_id: str) -> dict[str, str]:
    """What a reader of a results file needs to trust and reproduce it."""
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        "wirepipe.run_id": run_id,
        "wirepipe.pipeline": pipeline,
        "wirepipe.config": json.dumps(config or {}, default=str, sort_keys=True),
        "wirepipe.versions": json.dumps({"wirepipe": v("wirepipe"), **{lib: v(lib) for lib in _LIBRARIES}}),
        "wirepipe.host": json.dumps({
            "hostname": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
        }),
        "wirepipe.started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wirepipe.schema": json.dumps(SCHEMA_DOC),
    }


class MetricsRecorder:
    """Buffers stage rows and writes them to one Parquet file in row groups."""

    def __init__(self, path: str | Path, *, pipeline: str = "pipeline", config: dict[str, Any] | None = None,
                 row_group_rows: int = 8192, run_id: str | None = None) -> None:
        self.path = Path(path)
        self.pipeline = pipeline
        self.config = config
        self.row_group_rows = row_group_rows
        self.run_id = run_id or uuid.uuid4().hex
        self._cols: dict[str, list[Any]] = {name: [] for name in SCHEMA_DOC}
        self._writer: Any = None
        self.rows_written = 0

    def stamp(self, batch_index: int, stage: str, operator: str, params: dict[str, Any] | str, records: int,
              rejected: int, bytes_in: int | None, bytes_out: int | None, start_ns: int, end_ns: int) -> None:
        c = self._cols
        c["run_id"].append(self.run_id)
        c["pipeline"].append(self.pipeline)
        c["batch"].append(batch_index)
        c["stage"].append(stage)
        c["operator"].append(operator)
        c["params"].append(params if isinstance(params, str) else json.dumps(params, default=str, sort_keys=True))
        c["records"].append(records)
        c["rejected"].append(rejected)
        c["bytes_in"].append(bytes_in)
        c["bytes_out"].append(bytes_out)
        c["start_ns"].append(start_ns)
        c["end_ns"].append(end_ns)
        if len(c["stage"]) >= self.row_group_rows:
            self.flush()

    def _schema(self) -> Any:
        import pyarrow as pa

        fields = [
            pa.field("run_id", pa.string()), pa.field("pipeline", pa.string()), pa.field("batch", pa.int64()),
            pa.field("stage", pa.string()), pa.field("operator", pa.string()), pa.field("params", pa.string()),
            pa.field("records", pa.int64()), pa.field("rejected", pa.int64()),
            pa.field("bytes_in", pa.int64()), pa.field("bytes_out", pa.int64()),
            pa.field("start_ns", pa.int64()), pa.field("end_ns", pa.int64()),
        ]
        meta = run_metadata(self.pipeline, self.config, self.run_id)
        return pa.schema(fields, metadata=meta)

    def flush(self) -> None:
        """Write the buffered rows as one row group."""
        if not self._cols["stage"]:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            schema = self._schema()
            self._writer = pq.ParquetWriter(str(self.path), schema, compression="zstd")
        table = pa.Table.from_pydict(self._cols, schema=self._writer.schema)
        self._writer.write_table(table)
        self.rows_written += table.num_rows
        self._cols = {name: [] for name in SCHEMA_DOC}

    def close(self) -> None:
        """Flush and write the footer: the file is complete and readable after this."""
        self.flush()
        if self._writer is None:  # a run with no batches still leaves a valid, empty file
            import pyarrow.parquet as pq

            self.path.parent.mkdir(parents=True, exist_ok=True)
            schema = self._schema()
            self._writer = pq.ParquetWriter(str(self.path), schema, compression="zstd")
        self._writer.close()
        self._writer = None
