"""File connectors: ``null``, ``jsonl`` and ``parquet`` sinks; ``jsonl`` and ``parquet`` sources.

JSON Lines: one JSON value per line. Bytes are written as ``{"$base64": "<base64>"}``
(the same convention as the ``json`` format) and read back as bytes, so a payload
column (bytes after ``serialize``) or a record with byte fields survives the round
trip exactly. With ``envelope: true`` each line is ``{"value", "subject", "headers"}``.

Parquet: a payload column (bytes) is stored as a ``value`` binary column, next to
``subject`` and ``headers`` when the batch has them; decoded records (dicts) are
stored as Arrow columns, one per field. Records whose keys differ come back with the
missing keys as null: Parquet has one schema per file.

What ``flush()`` makes durable (the pipeline acknowledges a JetStream source only
after it): a JSONL file is flushed to the OS, which survives a kill of the process.
A Parquet file is only readable once its footer is written, so:

- ``path: out.parquet`` (one file): ``flush`` writes the buffered rows as a row group.
  A clean stop (end of input, SIGINT/SIGTERM drain) closes the file and everything
  acknowledged is in it; a SIGKILL leaves a file without footer.
- ``path: "out/part-{part}.parquet"`` (part files): ``flush`` closes the current part
  (footer, fsync) under a hidden ``.inprogress`` name and renames it into place, and the
  next write opens a new part. A part file that exists is complete; whatever was
  acknowledged is in one, even after a SIGKILL. The pipeline's ``flush_interval`` sets
  how often parts are cut.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import Field

from ..batch import Batch
from ..codecs.formats import B64_MARK, json_default, restore_bytes
from ..errors import WirepipeError
from ..pipelines.models import Duration, Strict
from .base import Sink, Source


def _expand(paths: str | list[str]) -> list[Path]:
    """Files named by a path, a glob, a folder (its files, sorted) or a list of those."""
    items = [paths] if isinstance(paths, str) else list(paths)
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
        elif any(ch in item for ch in "*?["):
            out += sorted(Path(m) for m in glob.glob(item))
        else:
            out.append(p)
    missing = [str(p) for p in out if not p.exists()]
    if missing or not out:
        raise WirepipeError(f"no such file: {', '.join(missing) or items}")
    return out


# --- null ----------------------------------------------------------------------------------------


class NullSink(Sink):
    """Discards every record and counts them (the sink for benchmarks)."""

    type = "null"
    stage = "write"

    def __init__(self) -> None:
        self.records = 0

    async def write(self, batch: Batch) -> None:
        self.records += len(batch.values)


class NullSinkConfig(Strict):
    type: Literal["null"]

    def build(self) -> NullSink:
        return NullSink()


# --- JSON Lines ------------------------------------------------------------------------------------


class JsonlSink(Sink):
    """One JSON value per line; bytes as ``{"$base64": ...}``. ``path: "-"`` writes to stdout."""

    type = "jsonl"
    stage = "write"

    def __init__(self, path: str | Path, *, envelope: bool = False, append: bool = False) -> None:
        self.path = str(path)
        self.envelope = envelope
        self.append = append
        self._file: IO[bytes] | None = None
        self.records = 0

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "envelope": self.envelope}

    async def open(self) -> None:
        if self.path == "-":
            self._file = sys.stdout.buffer
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab" if self.append else "wb")  # noqa: SIM115 - closed in close()

    async def write(self, batch: Batch) -> None:
        import orjson

        assert self._file is not None, "write() before open()"
        dumps = orjson.dumps
        opt = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
        if self.envelope:
            rows = [{"value": v, "subject": batch.subject_at(i), "headers": batch.headers_at(i)}
                    for i, v in enumerate(batch.values)]
        else:
            rows = batch.values
        self._file.write(b"".join([dumps(r, default=json_default, option=opt) for r in rows]))
        self.records += len(rows)

    async def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    async def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            if self._file is not sys.stdout.buffer:
                self._file.close()
            self._file = None


class JsonlSinkConfig(Strict):
    """``sink: {type: jsonl, path: out.jsonl}``"""

    type: Literal["jsonl"]
    path: str
    envelope: bool = False
    append: bool = False

    def build(self) -> JsonlSink:
        return JsonlSink(self.path, envelope=self.envelope, append=self.append)


class JsonlSource(Source):
    """Reads JSON Lines written by ``JsonlSink`` (or any JSONL), restoring ``$base64`` bytes."""

    type = "jsonl"
    stage = "read"

    def __init__(self, path: str | list[str], *, batch_size: int = 1000, count: int | None = None,
                 duration: float | None = None, envelope: bool = False) -> None:
        super().__init__(count=count, duration=duration)
        self.path = path
        self.batch_size = batch_size
        self.envelope = envelope

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "batch_size": self.batch_size, "count": self.count}

    async def batches(self) -> AsyncIterator[Batch]:
        limit = self.count
        lines: list[tuple[Path, int, bytes]] = []
        seq = 0
        for path in _expand(self.path):
            with open(path, "rb") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    lines.append((path, lineno, line))
                    if len(lines) >= self.batch_size or (limit is not None and seq + len(lines) >= limit):
                        yield self._batch(lines, seq)
                        seq += len(lines)
                        lines = []
                        if (limit is not None and seq >= limit) or self.stopping.is_set():
                            return
        if lines:
            yield self._batch(lines, seq)

    def _batch(self, lines: list[tuple[Path, int, bytes]], seq: int) -> Batch:
        """Parse lines; a line that is not JSON is dead-lettered, not fatal."""
        import orjson

        loads = orjson.loads
        values: list[Any] = []
        bad: list[tuple[int, str]] = []
        for i, (path, lineno, line) in enumerate(lines):
            try:
                v = loads(line)
                values.append(restore_bytes(v) if B64_MARK in line else v)
            except (orjson.JSONDecodeError, ValueError) as exc:
                values.append(line)
                bad.append((i, f"{path}:{lineno}: not a JSON line ({exc})"))
        batch = Batch(values, meta={"seq": list(range(seq, seq + len(values)))})
        if bad:
            batch.rejected = [batch.reject(i, self.stage, self.type, why) for i, why in bad]
            dropped = {i for i, _ in bad}
            batch.keep([i for i in range(len(values)) if i not in dropped])
        if self.envelope:
            rows = batch.values
            batch.subjects = [r.get("subject") for r in rows]
            batch.headers = [r.get("headers") for r in rows]
            batch.values = [r.get("value") for r in rows]
        return batch


class JsonlSourceConfig(Strict):
    """``source: {type: jsonl, path: in.jsonl}`` (a file, a glob, a folder or a list)"""

    type: Literal["jsonl"]
    path: str | list[str]
    batch_size: int = Field(default=1000, ge=1)
    count: int | None = Field(default=None, ge=0)
    duration: Duration | None = None
    envelope: bool = False

    def build(self) -> JsonlSource:
        return JsonlSource(self.path, batch_size=self.batch_size, count=self.count, duration=self.duration,
                           envelope=self.envelope)


# --- Parquet ----------------------------------------------------------------------------------------


class ParquetSink(Sink):
    """Writes a Parquet file in row groups of ``row_group_rows``; complete after ``close``.

    With ``{part}`` in the path, every ``flush`` completes a part file (see the module doc).
    """

    type = "parquet"
    stage = "write"

    def __init__(self, path: str | Path, *, row_group_rows: int = 65536, compression: str = "zstd") -> None:
        self.template = str(path)
        self.parts = "{part}" in self.template
        self.path = Path(path)
        self.row_group_rows = row_group_rows
        self.compression = compression
        self._pending: list[Any] = []
        self._pending_rows = 0
        self._writer: Any = None
        self._part_rows = 0
        self._part_index = 0
        self._run_tag = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
        self.records = 0
        self.files: list[Path] = []

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.template, "row_group_rows": self.row_group_rows}

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        self._pending.append(batch_table(batch, self._writer.schema if self._writer is not None else None))
        self._pending_rows += len(batch.values)
        self.records += len(batch.values)
        if self._pending_rows >= self.row_group_rows:
            self._write_pending()

    def _write_pending(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._pending:
            return
        if self._writer is None:
            if self.parts:
                self._part_index += 1
                final = Path(self.template.replace("{part}", f"{self._run_tag}-{self._part_index:05d}"))
                self.path = final.with_name(f".{final.name}.inprogress")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            first = self._pending[0]
            self._writer = pq.ParquetWriter(str(self.path), first.schema, compression=self.compression)
        table = pa.concat_tables([t.cast(self._writer.schema) if t.schema != self._writer.schema else t
                                  for t in self._pending])
        self._writer.write_table(table, row_group_size=max(self.row_group_rows, table.num_rows))
        self._part_rows += table.num_rows
        self._pending = []
        self._pending_rows = 0

    def _finish_part(self) -> None:
        """Footer, fsync, rename into place: the part file is complete the moment it has its name."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.close()
        tmp = self.path
        final = tmp.with_name(tmp.name[1:-len(".inprogress")])
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self.path = final
        self.files.append(final)
        self._part_rows = 0

    async def flush(self) -> None:
        self._write_pending()
        if self.parts:
            self._finish_part()

    async def close(self) -> None:
        self._write_pending()
        if self.parts:
            self._finish_part()
        elif self._writer is not None:
            self._writer.close()
            self._writer = None
            self.files.append(self.path)


def batch_table(batch: Batch, schema: Any = None) -> Any:
    """A batch as an Arrow table: payloads as ``value`` (+ ``subject``, ``headers``), records as columns.

    ``schema`` (the file's, once it has one) keeps later batches in the first one's types.
    """
    import pyarrow as pa

    values = batch.values
    if values and isinstance(values[0], (bytes, bytearray, memoryview)):
        cols: dict[str, Any] = {"value": pa.array(values, type=pa.binary())}
        if batch.subjects is not None:
            subjects = batch.subjects if isinstance(batch.subjects, list) else [batch.subjects] * len(values)
            cols["subject"] = pa.array(subjects, type=pa.string())
        if batch.headers is not None:
            headers = batch.headers if isinstance(batch.headers, list) else [batch.headers] * len(values)
            cols["headers"] = pa.array([list(h.items()) if h else None for h in headers],
                                       type=pa.map_(pa.string(), pa.string()))
        return pa.table(cols)
    if values and not isinstance(values[0], dict):
        return pa.table({"value": pa.array(values)})
    return pa.Table.from_pylist(values, schema=schema)


class ParquetSinkConfig(Strict):
    """``sink: {type: parquet, path: out.parquet}``"""

    type: Literal["parquet"]
    path: str
    row_group_rows: int = Field(default=65536, ge=1)
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"

    def build(self) -> ParquetSink:
        return ParquetSink(self.path, row_group_rows=self.row_group_rows, compression=self.compression)


class ParquetSource(Source):
    """Reads Parquet row group by row group: a ``value`` binary column as payloads, else rows as dicts."""

    type = "parquet"
    stage = "read"

    def __init__(self, path: str | list[str], *, batch_size: int = 65536, count: int | None = None,
                 duration: float | None = None) -> None:
        super().__init__(count=count, duration=duration)
        self.path = path
        self.batch_size = batch_size

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "batch_size": self.batch_size, "count": self.count}

    async def batches(self) -> AsyncIterator[Batch]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        left = self.count if self.count is not None else -1
        seq = 0
        for path in _expand(self.path):
            try:
                pf = pq.ParquetFile(str(path))
            except (pa.ArrowInvalid, OSError) as exc:
                raise WirepipeError(f"{path}: not a readable Parquet file ({exc})") from None
            names = pf.schema_arrow.names
            payload = "value" in names and pa.types.is_binary(pf.schema_arrow.field("value").type)
            for rb in pf.iter_batches(batch_size=self.batch_size):
                if left >= 0 and rb.num_rows > left:
                    rb = rb.slice(0, left)
                batch = _from_record_batch(rb, payload)
                batch.meta["seq"] = list(range(seq, seq + len(batch.values)))
                seq += len(batch.values)
                yield batch
                if left >= 0:
                    left -= len(batch.values)
                    if left == 0:
                        return
                if self.stopping.is_set():
                    return


def _from_record_batch(rb: Any, payload: bool) -> Batch:
    if not payload:
        if rb.schema.names == ["value"]:
            return Batch(rb.column(0).to_pylist())
        return Batch(rb.to_pylist())
    batch = Batch(rb.column("value").to_pylist())
    names = rb.schema.names
    if "subject" in names:
        batch.subjects = rb.column("subject").to_pylist()
    if "headers" in names:
        batch.headers = [dict(h) if h is not None else None for h in rb.column("headers").to_pylist()]
    return batch


class ParquetSourceConfig(Strict):
    """``source: {type: parquet, path: in.parquet}`` (a file, a glob, a folder or a list)"""

    type: Literal["parquet"]
    path: str | list[str]
    batch_size: int = Field(default=65536, ge=1)
    count: int | None = Field(default=None, ge=0)
    duration: Duration | None = None

    def build(self) -> ParquetSource:
        return ParquetSource(self.path, batch_size=self.batch_size, count=self.count, duration=self.duration)
