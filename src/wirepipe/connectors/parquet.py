"""Parquet connectors: the ``parquet`` sink and source.

A payload column (bytes) is stored as a ``value`` binary column, next to ``subject`` and
``headers`` when the batch has them; decoded records (dicts) are stored as Arrow columns,
one per field: every key of every record of the batch (a record without a key has null
there). Parquet has one schema per file, so the schema *evolves* by files: a batch with a
field the file lacks (or a type for a field that was only ever null), at any depth of nested
records, starts a new file whose schema is the old one plus the new nullable columns (a new
part; with a single ``path``, the next file is ``NAME-2.parquet``, ...). A value whose type conflicts with its
column (a string in an ``int64`` column) cannot be stored: that record goes to the dead
letter with the field and both types, the rest of the batch is written. No field is
dropped silently.

Files live ``storage/lifecycle.py``'s life: written under a hidden ``.NAME.PID.inprogress``
name through a ``SpoolingFile`` (a full disk keeps what does not fit in memory; ``flush``
raises the ``OSError``, the pipeline holds the records and retries, and the file is
completed, each row once, when there is room), renamed into place once its footer is on
disk (fsynced), so a file that exists is complete; what a killed run left is named when
the next one starts. What ``flush()`` makes durable (the pipeline acknowledges a JetStream
source only after it):

- ``path: out.parquet`` (one file): ``flush`` writes the buffered rows as a row group.
  A clean stop (end of input, SIGINT/SIGTERM drain) completes the file; a SIGKILL leaves
  only its temporary. Behind a source that acknowledges (a JetStream durable) that
  would lose acknowledged records, so the configuration is refused (use ``{part}``).
- ``path: "out/part-{part}.parquet"`` (part files): ``flush`` completes the current part
  and the next write opens a new one. Whatever was acknowledged is in a complete part,
  even after a SIGKILL. The pipeline's ``flush_interval`` sets how often parts are cut.
"""

from __future__ import annotations

import glob
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..core.batch import Batch, describe_error
from ..core.errors import Refusal, WirepipeError
from ..core.models import SourceLimits, Strict
from ..core.stages import Stage
from ..core.workers import Worker
from ..storage.files import Paths, TableBuffer, beside_file, fspaths, input_files, temp_glob
from ..storage.lifecycle import RollingParquetFiles
from .connector import AtLeastOnce, Configured, Sink, Source, WritesFiles
from .files import FileSource

log = logging.getLogger("wirepipe")


class ParquetSink(Configured, Sink, WritesFiles):
    """Writes Parquet in row groups of ``row_group_rows``; a file is complete after ``close``.

    With ``{part}`` in the path, every ``flush`` completes a part file (see the module doc).
    Rows wait in a ``TableBuffer`` until a row group is full or a flush; the
    schema of the open file changes only by starting a new file.
    """

    type = "parquet"
    stage = Stage.WRITE
    config: ParquetSinkConfig
    batch_results = "files"  # Beam replay writes Parquet result files in its own layout

    def __init__(self, path: str | os.PathLike[str], **fields: Any) -> None:
        """``fields`` are ``ParquetSinkConfig``'s (``row_group_rows``, ``compression``)."""
        self._init(ParquetSinkConfig, path=os.fspath(path), **fields)

    def _configure(self, config: ParquetSinkConfig) -> None:
        self.config = config
        self.parts = "{part}" in config.path  # part files: each flush completes one
        self._pending = TableBuffer()
        self._schema: Any = None  # the schema new rows are conformed to (the newest file's)
        template = Path(config.path)
        # the temporary names of this sink's files: its parts, or NAME.parquet, NAME-2.parquet...
        names = (glob.escape(template.name).replace("{part}", "*") if self.parts
                 else f"{glob.escape(template.stem)}*{glob.escape(template.suffix)}")
        self._out = RollingParquetFiles(template.parent, leftovers=temp_glob(names), what="parquet")
        self._index = 0
        self._run_tag = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
        self.records = 0

    @property
    def files(self) -> list[Path]:
        """The finished files, in order."""
        return self._out.files

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.config.path, "row_group_rows": self.config.row_group_rows}

    def refuse_source(self, source: Source) -> Refusal | None:
        """One Parquet file gets its footer only at close: behind a source that is acknowledged at each
        flush (a JetStream durable), a SIGKILL would lose acknowledged records. Part files do not."""
        if self.parts or not isinstance(source, AtLeastOnce):
            return None
        fix = str(Path(self.config.path).with_suffix("")) + "/part-{part}.parquet"
        return Refusal("path", f"{self.config.path!r} is one Parquet file, readable only once closed: behind a "
                               f"{source.type} source that is acknowledged at every flush, a killed worker would lose "
                               "acknowledged records. Write part files instead (each flush completes one): "
                               f"path: {fix!r}")

    def for_worker(self, index: int, count: int) -> ParquetSink:
        """``out.parquet`` -> ``out.w1.parquet``, ``{part}`` -> ``w1-{part}``: each worker's files have names of
        their own."""
        return self.reconfigured(path=Worker(index, count).path(self.config.path))

    def beside(self, suffix: str) -> str | None:
        """Next to a folder of parts, not in it: a reader takes the folder as one dataset
        (``archive/part-{part}.parquet`` -> ``archive.part.dead.jsonl``)."""
        name = beside_file(self.config.path, suffix)
        folder = Path(self.config.path).parent
        return str(folder.with_name(f"{folder.name}.{Path(name).name}")) if self.parts and folder.name else name

    async def open(self) -> None:
        self._out.start()

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        table = batch_table(batch, self._schema)  # a value Arrow cannot hold raises: the pipeline isolates it
        table = self._conform(table, batch)
        if table is None or not table.num_rows:
            return
        self._pending.append(table)
        self.records += table.num_rows
        if self._pending.rows >= self.config.row_group_rows:
            try:
                self._write_pending()
            except OSError as exc:  # the rows stay pending: the next flush tries again and reports it
                log.debug("parquet: writing %s deferred: %s", self.config.path, exc)

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
            else:
                grown = _evolved(schema.field(i).type, f.type)
                if grown is not None:
                    fields[i] = pa.field(f.name, grown, nullable=True)
                    evolved.append(f"{f.name} ({grown}, was {schema.field(i).type})")
        if evolved:
            schema = self._schema = pa.schema(fields, metadata=schema.metadata)
            log.warning("parquet %s: new field(s) %s: the schema evolves, the rows from here go to a new file",
                        self.config.path, ", ".join(evolved))
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
        """Write pending rows as row groups, starting a new file when the schema changed.

        A file finished before and still waiting for room on the disk is finalized first; while
        the disk is full that raises, and the rows stay pending for the next flush.
        """
        out = self._out
        out.finalize()
        pending = self._pending
        while pending:
            n, table = pending.leading_run()
            if out.current is not None and out.current.schema != table.schema:
                out.finish()
            file = out.current
            if file is None:
                file = out.open(self._next_path(), table.schema, compression=self.config.compression)
            file.write(table, row_group_size=max(self.config.row_group_rows, table.num_rows))
            pending.consume(n)  # taken for good only once written (into the spool: no I/O error here)

    def _next_path(self) -> Path:
        """A part's name (``{part}``: the run, then a number), or ``NAME.parquet``, ``NAME-2.parquet``, ..."""
        self._index += 1
        if self.parts:
            return Path(self.config.path.replace("{part}", f"{self._run_tag}-{self._index:05d}"))
        base = Path(self.config.path)
        return base if self._index == 1 else base.with_name(f"{base.stem}-{self._index}{base.suffix}")

    async def flush(self) -> None:
        self._write_pending()
        if self.parts:  # each flush completes a part: what the run loop acknowledges next is in a whole file
            self._out.finish()
        elif self._out.current is not None:
            self._out.current.drain()

    async def close(self) -> None:
        self._write_pending()
        self._out.finish()


def _evolved(old: Any, new: Any) -> Any:
    """``old`` grown by what ``new`` says of it, or None when it says nothing new: a type where ``old`` only
    knew null, at any depth (a nested field null in every record so far), and the fields of a struct that
    ``old`` lacks. Other differences are conflicts: the records that bring them are rejected."""
    import pyarrow as pa

    if pa.types.is_null(old):
        return None if pa.types.is_null(new) else new
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields, grew = list(old), False
        for f in new:
            i = old.get_field_index(f.name)
            grown = f.type if i < 0 else _evolved(old.field(i).type, f.type)
            if grown is not None:
                if i < 0:
                    fields.append(pa.field(f.name, grown, nullable=True))
                else:
                    fields[i] = pa.field(f.name, grown, nullable=True)
                grew = True
        return pa.struct(fields) if grew else None
    if pa.types.is_list(old) and pa.types.is_list(new):
        grown = _evolved(old.value_type, new.value_type)
        return None if grown is None else pa.list_(grown)
    return None


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
            cols["subject"] = pa.array(batch.subjects_column(), type=pa.string())
        if batch.headers is not None:
            cols["headers"] = pa.array([list(h.items()) if h else None for h in batch.headers_column()],
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
    path: str = Field(description="one file (complete after a clean stop), or part files with {part} "
                      "(each complete at a flush: what a redelivering source needs)")
    row_group_rows: int = Field(default=65536, ge=1, description="rows per row group")
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = Field(
        default="zstd", description="Parquet compression of the columns")

    def build(self) -> ParquetSink:
        return ParquetSink.from_config(self)


class ParquetSource(FileSource):
    """Reads Parquet row group by row group: a ``value`` binary column as payloads, else rows as dicts."""

    type = "parquet"
    config: ParquetSourceConfig

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``ParquetSourceConfig``'s (``batch_size``, ``count``, ``duration``)."""
        self._init(ParquetSourceConfig, path=fspaths(path), **fields)

    async def batches(self) -> AsyncIterator[Batch]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        left = self.count if self.count is not None else -1
        seq = 0
        for path in input_files(self.config.path):
            try:
                pf = pq.ParquetFile(str(path))
            except (pa.ArrowInvalid, OSError) as exc:
                raise WirepipeError(f"{path}: not a readable Parquet file ({exc})") from None
            names = pf.schema_arrow.names
            payload = "value" in names and pa.types.is_binary(pf.schema_arrow.field("value").type)
            for rb in pf.iter_batches(batch_size=self.config.batch_size):
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

    suffixes: ClassVar[tuple[str, ...]] = (".parquet",)  # the files it reads, by name (connectors/files.py)

    type: Literal["parquet"]
    path: str | list[str] = Field(description="a file, a glob, a folder (its files in name order) "
                                   "or a list of them")
    batch_size: int = Field(default=65536, ge=1, description="records per batch: the unit operators, metrics and commits work on")

    def build(self) -> ParquetSource:
        return ParquetSource.from_config(self)


SOURCES = {"parquet": ParquetSourceConfig}
SINKS = {"parquet": ParquetSinkConfig}
RANK = 3  # where its types come in the "allowed" lists (connectors/__init__.py)
