"""File connectors: ``null``, ``jsonl`` and ``parquet`` sinks; ``jsonl`` and ``parquet`` sources.

JSON Lines: one JSON value per line. Bytes are written as ``{"$base64": "<base64>"}``
(the same convention as the ``json`` format) and read back as bytes, so a payload
column (bytes after ``serialize``) or a record with byte fields survives the round
trip exactly. With ``envelope: true`` each line is ``{"value", "subject", "headers"}``.

Parquet: a payload column (bytes) is stored as a ``value`` binary column, next to
``subject`` and ``headers`` when the batch has them; decoded records (dicts) are
stored as Arrow columns, one per field: every key of every record of the batch (a
record without a key has null there). Parquet has one schema per file, so the schema
*evolves* by files: a batch with a field the file lacks (or a type for a field that was
only ever null) starts a new file whose schema is the old one plus the new nullable
columns (a new part; with a single ``path``, the next file is ``NAME-2.parquet``, ...).
A value whose type conflicts with its column (a string in an ``int64`` column) cannot
be stored: that record goes to the dead letter with the field and both types, the rest
of the batch is written. No field is dropped silently.

Full disk: files are written through a ``SpoolingFile``: a write that finds no space
leaves the rest in memory, ``flush`` fails (the pipeline holds the records and retries)
and continues exactly where it stopped once there is room. Nothing is written twice.
The failure is the ``OSError`` itself (``ENOSPC``, or ``EDQUOT``, ``EIO``), not a ``BackOff``:
the OS does not say when room comes back, and the run loop already treats an ``OSError``
from a sink as the sink's condition, retried with its own bounded backoff (50 ms doubling
to 5 s, under a third of a JetStream source's ``ack_wait``). ``BackOff(wait)`` is for a
part that knows how long to wait (a server that says "retry later").

What ``flush()`` makes durable (the pipeline acknowledges a JetStream source only
after it): a JSONL file is flushed to the OS, which survives a kill of the process.
A Parquet file is only readable once its footer is written, so:

- ``path: out.parquet`` (one file): ``flush`` writes the buffered rows as a row group.
  A clean stop (end of input, SIGINT/SIGTERM drain) closes the file; a SIGKILL leaves a
  file without footer. Behind a source that acknowledges (a JetStream durable) that
  would lose acknowledged records, so the configuration is refused (use ``{part}``).
- ``path: "out/part-{part}.parquet"`` (part files): ``flush`` closes the current part
  (footer, fsync) under a hidden ``.inprogress`` name and renames it into place, and the
  next write opens a new part. A part file that exists is complete; whatever was
  acknowledged is in one, even after a SIGKILL. The pipeline's ``flush_interval`` sets
  how often parts are cut.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import Field

from ..codecs.formats import B64_MARK, json_default, restore_bytes
from ..core.batch import Batch, describe_error
from ..core.errors import Refusal, WirepipeError
from ..core.models import SourceLimits, Strict
from ..core.workers import Worker
from ..storage.files import (
    TEMP_SUFFIX,
    AtomicFile,
    Paths,
    TableBuffer,
    find_files,
    fspaths,
    report_unfinished,
)
from ..storage.spool import SpoolingFile, check_writable
from .base import Configured, Sink, Source

log = logging.getLogger("wirepipe")


def _expand(paths: str | list[str]) -> list[Path]:
    """Files named by a path, a glob, a folder (its files, sorted) or a list of those (``storage.find_files``)."""
    return find_files(paths, on_empty=lambda folder: f"{folder}: no files in this folder")


# --- null ----------------------------------------------------------------------------------------


class NullSink(Configured, Sink):
    """Discards every record and counts them (the sink for benchmarks)."""

    type = "null"
    stage = "write"
    batch_results = "nothing"  # Beam replay: no results to write

    def __init__(self) -> None:
        self._init(NullSinkConfig)

    def _configure(self, config: NullSinkConfig) -> None:
        self.config = config
        self.records = 0

    async def write(self, batch: Batch) -> None:
        self.records += len(batch.values)


class NullSinkConfig(Strict):
    type: Literal["null"]

    def build(self) -> NullSink:
        return NullSink.from_config(self)


# --- JSON Lines ------------------------------------------------------------------------------------


class JsonlSink(Configured, Sink):
    """One JSON value per line; bytes as ``{"$base64": ...}``. ``path: "-"`` writes to stdout."""

    type = "jsonl"
    stage = "write"
    batch_results = "files"  # Beam replay writes Parquet result files instead

    def __init__(self, path: str | os.PathLike[str], **fields: Any) -> None:
        """``fields`` are ``JsonlSinkConfig``'s (``envelope``, ``append``)."""
        self._init(JsonlSinkConfig, path=os.fspath(path), **fields)

    def _configure(self, config: JsonlSinkConfig) -> None:
        self.config = config
        self.path = config.path
        self.envelope = config.envelope
        self.append = config.append
        self._file: IO[bytes] | SpoolingFile | None = None
        self.records = 0

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "envelope": self.envelope}

    def refuse_workers(self, workers: int) -> Refusal | None:
        if self.path != "-":
            return None
        return Refusal("path", f"'-' (stdout) cannot be shared by several workers ({workers}): give a file (each "
                               "worker writes its own copy, out.jsonl -> out.w0.jsonl, out.w1.jsonl, ...), or use "
                               "one worker")

    def worker_fields(self, worker: Worker) -> dict[str, Any]:
        return {} if self.path == "-" else {"path": worker.path(self.path)}

    def beside(self, suffix: str) -> str | None:
        return None if self.path == "-" else beside_file(self.path, suffix)

    async def open(self) -> None:
        if self.path == "-":
            self._file = sys.stdout.buffer
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        if self.append:
            _cut_torn_line(Path(self.path))
        self._file = SpoolingFile(self.path, append=self.append)

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
        if isinstance(self._file, SpoolingFile):
            self._file.drain()  # raises while the disk is full; the next flush continues
        elif self._file is not None:
            self._file.flush()

    async def close(self) -> None:
        file, self._file = self._file, None
        if isinstance(file, SpoolingFile):
            file.close(rollback=True)  # a full disk at the end: no torn line is left (those records were not acked)
        elif file is not None:
            file.flush()


def beside_file(path: str, suffix: str) -> str:
    """``path``'s name with its suffix (and a ``{part}`` placeholder) replaced by ``suffix``:
    ``out/records.jsonl`` -> ``out/records.dead.jsonl``, ``out/part-w0-{part}.parquet`` -> ``out/part-w0.dead.jsonl``."""
    p = Path(path)
    stem = (p.stem if p.suffix else p.name).replace("{part}", "").strip("-_.") or "records"
    return str(p.with_name(stem + suffix))


def _cut_torn_line(path: Path) -> None:
    """A file a killed writer left without a final newline ends in a torn line: never acknowledged
    (a flush completes whole lines), so it is cut off before appending, not left mid-file."""
    if not path.exists() or not path.stat().st_size:
        return
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        size = f.seek(0, os.SEEK_END)
        keep = 0
        block = 1 << 16
        end = size
        while end > 0 and not keep:
            start = max(0, end - block)
            f.seek(start)
            chunk = f.read(end - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
            end = start
        f.truncate(keep)
    log.warning("%s ended in a torn line (a writer was killed): cut %d bytes before appending", path, size - keep)


class JsonlSinkConfig(Strict):
    """``sink: {type: jsonl, path: out.jsonl}``"""

    type: Literal["jsonl"]
    path: str
    envelope: bool = False
    append: bool = False

    def build(self) -> JsonlSink:
        return JsonlSink.from_config(self)


class JsonlSource(Configured, Source):
    """Reads JSON Lines written by ``JsonlSink`` (or any JSONL), restoring ``$base64`` bytes."""

    type = "jsonl"
    stage = "read"
    bounded = True

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``JsonlSourceConfig``'s (``batch_size``, ``count``, ``duration``, ``envelope``)."""
        self._init(JsonlSourceConfig, path=fspaths(path), **fields)

    def _configure(self, config: JsonlSourceConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.path = config.path
        self.batch_size = config.batch_size
        self.envelope = config.envelope

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "batch_size": self.batch_size, "count": self.count}

    def check_input(self) -> None:
        _expand(self.path)

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


class JsonlSourceConfig(SourceLimits):
    """``source: {type: jsonl, path: in.jsonl}`` (a file, a glob, a folder or a list)"""

    type: Literal["jsonl"]
    path: str | list[str]
    batch_size: int = Field(default=1000, ge=1)
    envelope: bool = False

    def build(self) -> JsonlSource:
        return JsonlSource.from_config(self)


# --- Parquet ----------------------------------------------------------------------------------------


class ParquetSink(Configured, Sink):
    """Writes Parquet in row groups of ``row_group_rows``; a file is complete after ``close``.

    With ``{part}`` in the path, every ``flush`` completes a part file (see the module doc).
    Rows wait in a ``TableBuffer`` until a row group is full or a flush; the
    schema of the open file changes only by starting a new file.
    """

    type = "parquet"
    stage = "write"
    batch_results = "files"  # Beam replay writes Parquet result files in its own layout

    def __init__(self, path: str | os.PathLike[str], **fields: Any) -> None:
        """``fields`` are ``ParquetSinkConfig``'s (``row_group_rows``, ``compression``)."""
        self._init(ParquetSinkConfig, path=os.fspath(path), **fields)

    def _configure(self, config: ParquetSinkConfig) -> None:
        self.config = config
        self.template = config.path
        self.parts = "{part}" in self.template
        self.path = Path(config.path)
        self.row_group_rows = config.row_group_rows
        self.compression = config.compression
        self._pending = TableBuffer()
        self._schema: Any = None  # the schema new rows are conformed to (the newest file's)
        self._writer: Any = None
        self._writer_schema: Any = None
        self._spool: SpoolingFile | None = None
        self._atomic: AtomicFile | None = None  # a part file being written, under its temporary name
        self._closing: SpoolingFile | None = None  # a finished file whose bytes are still spooled
        self._closing_atomic: AtomicFile | None = None  # ... and, for a part, its rename still to do
        self._part_rows = 0
        self._part_index = 0
        self._file_index = 0
        self._run_tag = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
        self.records = 0
        self.files: list[Path] = []

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.template, "row_group_rows": self.row_group_rows}

    def refuse_source(self, source: Source) -> Refusal | None:
        """One Parquet file gets its footer only at close: behind a source that is acknowledged at each
        flush (a JetStream durable), a SIGKILL would lose acknowledged records. Part files do not."""
        if self.parts or not source.redelivers:
            return None
        fix = str(Path(self.template).with_suffix("")) + "/part-{part}.parquet"
        return Refusal("path", f"{self.template!r} is one Parquet file, readable only once closed: behind a "
                               f"{source.type} source that is acknowledged at every flush, a killed worker would lose "
                               "acknowledged records. Write part files instead (each flush completes one): "
                               f"path: {fix!r}")

    def worker_fields(self, worker: Worker) -> dict[str, Any]:
        """``out.parquet`` -> ``out.w1.parquet``, ``{part}`` -> ``w1-{part}``: each worker's files have names of
        their own."""
        return {"path": worker.path(self.template)}

    def beside(self, suffix: str) -> str | None:
        return beside_file(self.template, suffix)

    async def open(self) -> None:
        folder = Path(self.template).parent
        check_writable(folder)
        if self.parts:  # what a killed or stopped run left of its parts (ours would be named like them)
            report_unfinished(folder, f".{Path(self.template).name.replace('{part}', '*')}*{TEMP_SUFFIX}", "parquet")

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        table = batch_table(batch, self._schema)  # a value Arrow cannot hold raises: the pipeline isolates it
        table = self._conform(table, batch)
        if table is None or not table.num_rows:
            return
        self._pending.append(table)
        self.records += table.num_rows
        if self._pending.rows >= self.row_group_rows:
            try:
                self._write_pending()
            except OSError as exc:  # the rows stay pending: the next flush tries again and reports it
                log.debug("parquet: writing %s deferred: %s", self.path, exc)

    def _conform(self, table: Any, batch: Batch) -> Any:
        """``table`` in the current schema: new fields evolve it, type conflicts reject their records."""
        import pyarrow as pa

        schema = self._schema
        if schema is None or table.schema == schema:
            self._schema = table.schema if schema is None else schema
            return table
        fields = list(schema)
        evolved = []
        for f in table.schema:
            i = schema.get_field_index(f.name)
            if i < 0:
                fields.append(pa.field(f.name, f.type, nullable=True))
                evolved.append(f"{f.name} ({f.type})")
            elif pa.types.is_null(schema.field(i).type) and not pa.types.is_null(f.type):
                fields[i] = pa.field(f.name, f.type, nullable=True)
                evolved.append(f"{f.name} ({f.type}, was null)")
        if evolved:
            schema = self._schema = pa.schema(fields, metadata=schema.metadata)
            log.warning("parquet %s: new field(s) %s: the schema evolves, the rows from here go to a new file",
                        self.template, ", ".join(evolved))
        columns = []
        bad: dict[int, str] = {}
        for f in schema:
            if table.schema.get_field_index(f.name) < 0:
                columns.append(pa.nulls(table.num_rows, f.type))
                continue
            col = table.column(f.name)
            if col.type == f.type:
                columns.append(col)
                continue
            try:
                columns.append(col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                cast, reasons = _cast_or_null(col, f)
                columns.append(cast)
                for i, why in reasons.items():
                    bad.setdefault(i, why)
        out = pa.Table.from_arrays(columns, schema=schema)
        if bad:
            batch.rejected += [batch.reject(i, self.stage, self.type, why) for i, why in sorted(bad.items())]
            good = [i for i in range(out.num_rows) if i not in bad]
            batch.keep(good)
            out = out.take(pa.array(good, pa.int64()))
        return out

    def _write_pending(self) -> None:
        """Write pending rows as row groups, opening a new file when the schema changed."""
        self._finish_closing()
        pending = self._pending
        while pending:
            n, table = pending.leading_run()
            if self._writer is not None and self._writer_schema != table.schema:
                self._end_file()
            if self._writer is None:
                self._open_file(table.schema)
            self._writer.write_table(table, row_group_size=max(self.row_group_rows, table.num_rows))
            pending.consume(n)  # taken for good only once written (into the spool: no I/O error here)
            self._part_rows += table.num_rows

    def _open_file(self, schema: Any) -> None:
        import pyarrow.parquet as pq

        if self.parts:
            self._part_index += 1
            final = Path(self.template.replace("{part}", f"{self._run_tag}-{self._part_index:05d}"))
            self._atomic = AtomicFile(final, owner=os.getpid())  # a pool's other workers tell it from a leftover
            self.path, spool = self._atomic.temp, self._atomic.file
        else:
            self._file_index += 1
            base = Path(self.template)
            self.path = base if self._file_index == 1 else base.with_name(
                f"{base.stem}-{self._file_index}{base.suffix}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            spool = SpoolingFile(self.path)
        self._writer = pq.ParquetWriter(spool, schema, compression=self.compression)
        self._spool, self._writer_schema = spool, schema

    def _end_file(self) -> None:
        """Footer into the spool; ``_finish_closing`` gets it to disk (and renames a part into place)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        writer.close()
        self._closing, self._spool = self._spool, None
        self._closing_atomic, self._atomic = self._atomic, None
        self._finish_closing()

    def _finish_closing(self) -> None:
        spool = self._closing
        if spool is None:
            return
        if self._closing_atomic is not None:  # a part: fsync, rename into place (resumable)
            path = self._closing_atomic.commit(fsync=True)
            self._closing_atomic = None
        else:
            spool.fsync()  # raises while the disk is full: the next flush resumes here
            spool.close()
            path = spool.path
        self._closing = None
        self.files.append(path)
        self._part_rows = 0

    async def flush(self) -> None:
        self._write_pending()
        if self.parts:
            self._end_file()
        elif self._spool is not None:
            self._spool.drain()

    async def close(self) -> None:
        self._write_pending()
        self._end_file()


def _cast_or_null(col: Any, field: Any) -> tuple[Any, dict[int, str]]:
    """Cast value by value: the values that do not fit become null, with the reason per row."""
    import pyarrow as pa

    values = []
    reasons: dict[int, str] = {}
    for i, chunk in enumerate(col.to_pylist()):
        try:
            values.append(pa.array([chunk], col.type).cast(field.type)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            values.append(None)
            reasons[i] = (f"field {field.name!r}: a {col.type} value does not fit the file's column of type "
                          f"{field.type} ({describe_error(exc)})")
    return pa.array(values, field.type), reasons


def batch_table(batch: Batch, schema: Any = None) -> Any:
    """A batch as an Arrow table: payloads as ``value`` (+ ``subject``, ``headers``), records as columns.

    Records (dicts) give one column per key of *any* record (missing keys are null), so no field
    is dropped. ``schema`` (the file's) gives the types of the columns it knows: converting to a
    known type is faster than inferring and cannot recurse without end on a cyclic value.
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
        return pa.table({"value": _arrow_column(values, _known_type(schema, "value"))})
    keys = dict.fromkeys(k for v in values for k in v)
    return pa.table({k: _arrow_column([v.get(k) for v in values], _known_type(schema, k)) for k in keys})


def _known_type(schema: Any, name: str) -> Any:
    if schema is None or schema.get_field_index(name) < 0:
        return None
    return schema.field(name).type


_CONTAINERS = (list, tuple, dict, set, frozenset)
MAX_NESTING = 64


def _arrow_column(values: list[Any], known: Any = None) -> Any:
    """The column as an Arrow array: in its ``known`` type when the values fit, else inferred.

    Inferring walks nested values without a depth limit, and a cyclic value (CBOR shared
    references, pickle) sends pyarrow's converter into a recursion that kills the process:
    before inferring, containers are checked to nest at most ``MAX_NESTING`` levels. A
    conversion to a known type needs no check (it fails at the type's depth), and the check
    runs only on a file's first rows and on new columns.
    """
    import pyarrow as pa

    if known is not None and not pa.types.is_null(known):
        try:
            return pa.array(values, type=known)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            pass  # a value of another type: inferred here, the sink rejects the records that conflict
    for v in values:
        if type(v) in _CONTAINERS:
            _check_depth(v)
    return pa.array(values)


def _check_depth(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"value nested deeper than {MAX_NESTING} levels (a cyclic structure?)")
        items = v.values() if isinstance(v, dict) else v
        stack += [(x, depth + 1) for x in items if type(x) in _CONTAINERS]


class ParquetSinkConfig(Strict):
    """``sink: {type: parquet, path: out.parquet}``"""

    type: Literal["parquet"]
    path: str
    row_group_rows: int = Field(default=65536, ge=1)
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"

    def build(self) -> ParquetSink:
        return ParquetSink.from_config(self)


class ParquetSource(Configured, Source):
    """Reads Parquet row group by row group: a ``value`` binary column as payloads, else rows as dicts."""

    type = "parquet"
    stage = "read"
    bounded = True

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``ParquetSourceConfig``'s (``batch_size``, ``count``, ``duration``)."""
        self._init(ParquetSourceConfig, path=fspaths(path), **fields)

    def _configure(self, config: ParquetSourceConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.path = config.path
        self.batch_size = config.batch_size

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "batch_size": self.batch_size, "count": self.count}

    def check_input(self) -> None:
        _expand(self.path)

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


class ParquetSourceConfig(SourceLimits):
    """``source: {type: parquet, path: in.parquet}`` (a file, a glob, a folder or a list)"""

    type: Literal["parquet"]
    path: str | list[str]
    batch_size: int = Field(default=65536, ge=1)

    def build(self) -> ParquetSource:
        return ParquetSource.from_config(self)


SOURCES = {"jsonl": JsonlSourceConfig, "parquet": ParquetSourceConfig}
SINKS = {"null": NullSinkConfig, "jsonl": JsonlSinkConfig, "parquet": ParquetSinkConfig}
RANK = 1  # where its types come in the "allowed" lists (connectors/__init__.py)
