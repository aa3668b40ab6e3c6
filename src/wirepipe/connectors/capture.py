"""The capture format: messages as they were received, in Parquet files that replays can split.

A capture is a folder of Parquet files with one row per message (columns in
``CAPTURE_COLUMNS``). The ``capture`` sink writes them; the ``capture`` source reads them
back as batches shaped like the ones a NATS source yields (payloads as received, per
record subjects and headers, ``sent_ns``/``received_ns``/``stream_seq`` meta), so a
replayed pipeline cannot tell the difference and ``decompress: auto`` /
``deserialize: auto`` work from the captured headers.

Files are written under a hidden temporary name (``.NAME.inprogress``) and renamed when
complete (footer written and fsynced), so a reader listing the folder never sees a
half-written file. They rotate by size and by age and are named so that name order is
capture order (``capture-<UTC start time>-<n>.parquet``). Row groups hold up to
``row_group_rows`` rows (64Ki by default, fewer when ``row_group_size`` bytes come
first): a replay splits work by row group.

Durability: ``flush()`` completes the current file (``sink.flush`` means "what was
written is durable"), so a pipeline that acknowledges after flushing never acknowledges
a record that is not in a complete file. A full disk: the file is written through a
``SpoolingFile``, so what does not fit waits in memory, ``flush()`` raises
``SinkUnavailable`` (the pipeline holds the records and retries) and completes the same
file once there is room. No file is dropped and written again: a record is in one file.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from ..core.batch import PAYLOADS, Batch, describe_error
from ..core.errors import ConfigError, SinkUnavailable, WirepipeError
from ..core.models import Duration, Size, SourceLimits, Strict
from ..core.workers import Worker
from ..storage.files import (
    TEMP_SUFFIX,
    AtomicFile,
    Paths,
    TableBuffer,
    find_files,
    fspaths,
    is_hidden,
    report_unfinished,
)
from ..storage.spool import check_writable
from ..wire import Header, subject_regex
from .base import Configured, Sink, Source, Unreadable

log = logging.getLogger("wirepipe.capture")

SENT_AT = Header.SENT_AT.value
FORMAT_VERSION = 1

CAPTURE_COLUMNS: dict[str, str] = {
    "seq": "record number in the capture written by one sink, from 0, continuing across its rotated files",
    "subject": "NATS subject the message was received on",
    "headers": "message headers as received (map<string,string>; null when the message had none)",
    "payload": "message payload, bytes exactly as received",
    "sent_ns": "publish time from the Wirepipe-Sent-At header, ns since the Unix epoch (null if absent)",
    "received_ns": "time the consumer received the message, ns since the Unix epoch",
    "stream_seq": "JetStream stream sequence (null for core NATS)",
}


def capture_schema(metadata: dict[str, str] | None = None) -> Any:
    import pyarrow as pa

    return pa.schema([
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("subject", pa.string()),
        pa.field("headers", pa.map_(pa.string(), pa.string())),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("sent_ns", pa.int64()),
        pa.field("received_ns", pa.int64()),
        pa.field("stream_seq", pa.int64()),
    ], metadata=metadata)


# --- writing ---------------------------------------------------------------------------------------


def _parse_ns(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def capture_table(batch: Batch, first_seq: int, schema: Any) -> Any:
    """A batch of payloads as capture rows (a ``pyarrow.Table``); refuses decoded values."""
    import pyarrow as pa

    values = batch.values
    n = len(values)
    if n and not isinstance(values[0], (bytes, bytearray, memoryview)):
        # The pipeline's shape, not the sink's state nor a record: stop (a sink failure would be retried).
        raise ConfigError(
            f"the capture sink stores payloads as received, but got {type(values[0]).__name__} values: "
            "put it before any deserialize operator (or after serialize)")
    subjects = batch.subjects
    subject = pa.array([subjects] * n if isinstance(subjects, str) or subjects is None else subjects, pa.string())
    headers = batch.headers
    if headers is None:
        header_array = pa.nulls(n, schema.field("headers").type)
        per_record: list[dict[str, str] | None] = [None] * n
    else:
        per_record = [headers] * n if isinstance(headers, dict) else headers
        header_array = _map_array(per_record)
    meta = batch.meta
    sent = meta.get("sent_ns")
    if sent is None:
        sent = [_parse_ns(h.get(SENT_AT)) if h else None for h in per_record]
    received = meta.get("received_ns")
    if received is None:  # the source did not stamp it: the time the sink got the batch
        received = [time.time_ns()] * n
    stream_seq = meta.get("stream_seq")
    return pa.Table.from_arrays([
        pa.array(range(first_seq, first_seq + n), pa.int64()),
        subject,
        header_array,
        pa.array(values, pa.binary()),
        pa.array(sent, pa.int64()),
        pa.array(received, pa.int64()),
        pa.nulls(n, pa.int64()) if stream_seq is None else pa.array(stream_seq, pa.int64()),
    ], schema=schema)


def _map_array(headers: list[dict[str, str] | None]) -> Any:
    """Per-record header dicts as a map array, built from flat key/value columns (the fast way)."""
    import pyarrow as pa

    keys: list[str] = []
    items: list[str] = []
    offsets = [0]
    valid = []
    end = 0
    for h in headers:
        if h:
            keys.extend(h)
            items.extend(h.values())
            end += len(h)
        offsets.append(end)
        valid.append(h is not None)
    mask = None if all(valid) else pa.array([not v for v in valid])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(items, pa.string()), mask=mask)


class CaptureWriter(Configured):
    """Writes capture rows into rotating Parquet files (synchronous; the sink runs it in a thread).

    Rows accumulate until a row group is full (``row_group_rows`` rows or ``row_group_size``
    bytes); a file is finished (footer, fsync, rename) when it reaches ``max_file_size``
    bytes or ``max_file_age`` seconds, on ``finish_file()`` and on ``close()``. Its settings are
    the capture sink's (``CaptureSinkConfig``); ``clock`` (a test's) measures file age.
    """

    clock: Callable[[], float]

    def __init__(self, folder: str | os.PathLike[str], *, clock: Callable[[], float] = time.monotonic,
                 **fields: Any) -> None:
        """``fields`` are ``CaptureSinkConfig``'s (``prefix``, ``max_file_size``, ``row_group_rows``, ``fsync``...)."""
        self._init(CaptureSinkConfig, dir=os.fspath(folder), **fields)
        self.clock = clock

    def _configure(self, config: CaptureSinkConfig) -> None:
        self.config = config
        self.clock = time.monotonic
        self.folder = Path(config.dir)
        self.prefix = config.prefix
        self.max_file_size = config.max_file_size
        self.max_file_age = config.max_file_age
        self.row_group_rows = config.row_group_rows
        self.row_group_size = config.row_group_size
        self.compression = config.compression
        self.fsync = config.fsync
        self.metadata = config.metadata
        self.files: list[Path] = []  # completed files, in order
        self.records = 0  # rows appended so far (the next row's seq)
        self._pending = TableBuffer()
        self._writer: Any = None
        self._file: AtomicFile | None = None  # the file being written, under its temporary name
        self._started: float | None = None  # when the current file got its first row
        self._index = 0
        self._last_stamp = ""
        self._failed: BaseException | None = None  # writing failed; finish_file retries (and says so)

    def schema(self) -> Any:
        from importlib.metadata import version

        info = {"format": FORMAT_VERSION, "writer": f"wirepipe {version('wirepipe')}",
                "columns": CAPTURE_COLUMNS, "metadata": self.metadata}
        return capture_schema({"wirepipe.capture": json.dumps(info, default=str, sort_keys=True)})

    def append(self, table: Any) -> None:
        """Add capture rows; writes full row groups and rotates the file when it is due.

        Never fails once the rows are taken (they are the pipeline's to acknowledge later):
        a file that cannot be created or written now (disk full) keeps its rows in memory,
        and ``finish_file`` retries and raises ``SinkUnavailable`` until it works.
        """
        if table.num_rows == 0:
            return
        if self._started is None:
            self._started = self.clock()
        self._pending.append(table)
        self.records += table.num_rows
        try:
            if self._pending.rows >= self._group_rows():
                self._write_row_groups(final=False)
            if self._failed is None and (self.due() or self._size() >= self.max_file_size):
                self._finish()
        except OSError as exc:
            self._note_failure(exc)

    def _note_failure(self, exc: BaseException) -> None:
        if self._failed is None:
            log.error("capture: writing into %s failed (%s): holding the records, retrying", self.folder, exc)
        self._failed = exc

    def due(self) -> bool:
        """The current file is older than ``max_file_age``."""
        return self._started is not None and self.clock() - self._started >= self.max_file_age

    def rotate_if_due(self) -> None:
        """Complete the current file if it is old enough (a failure stays for ``finish_file`` to report)."""
        if self._failed is None and self.due():
            try:
                self._finish()
            except OSError as exc:
                self._note_failure(exc)

    def _size(self) -> int:
        written = self._file.file.tell() if self._file is not None else 0
        return written + self._pending.nbytes

    def _group_rows(self) -> int:
        """Rows per row group: ``row_group_rows``, fewer when their bytes would pass ``row_group_size``."""
        if not self._pending.rows:
            return self.row_group_rows
        per_row = max(1.0, self._pending.nbytes / self._pending.rows)
        return max(1, min(self.row_group_rows, int(self.row_group_size // per_row)))

    def _write_row_groups(self, *, final: bool) -> None:
        """Write pending rows as full row groups; the rest waits for more rows unless ``final``."""
        if not self._pending:
            return
        step = self._group_rows()
        self._open()  # before the rows leave _pending: a file that cannot be created keeps them
        n, table = self._pending.leading_run()  # capture rows share one schema: all of them
        full = table.num_rows if final else table.num_rows // step * step
        if full:
            for start in range(0, full, step):
                self._writer.write_table(table.slice(start, min(step, full - start)), row_group_size=step)
        self._pending.consume(n, rest=table.slice(full))

    def _open(self) -> None:
        if self._writer is not None:
            return
        if self._file is not None:
            self._complete()  # the previous file first
        import pyarrow.parquet as pq

        self.folder.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 1_000_000:06d}Z"
        stamp = self._last_stamp = max(stamp, self._last_stamp)  # names keep capture order if the clock steps back
        while True:
            self._index += 1
            final = self.folder / f"{self.prefix}-{stamp}-{self._index:05d}.parquet"
            if AtomicFile.free(final):
                break
        self._file = AtomicFile(final, owner=os.getpid())  # a pool's other workers tell it from a leftover
        self._writer = pq.ParquetWriter(self._file.file, self.schema(), compression=self.compression)

    def finish_file(self) -> Path | None:
        """Write what is pending and complete the current file; returns its final path.

        Raises ``SinkUnavailable`` while the file cannot be written (disk full): the rows and
        the bytes not yet on disk are kept, and the next call continues where this one stopped,
        so each record is written once.
        """
        try:
            path = self._finish()
        except OSError as exc:
            self._note_failure(exc)
            raise SinkUnavailable(f"capture: cannot write into {self.folder}: {describe_error(exc)}") from exc
        if self._failed is not None:
            log.warning("capture: writing into %s works again", self.folder)
            self._failed = None
        return path

    def _finish(self) -> Path | None:
        done = None
        if self._file is not None and self._writer is None:
            done = self._complete()  # a file finished before, not all on disk yet: its rows come first
        self._write_row_groups(final=True)
        self._started = None
        if self._writer is None:
            return done
        self._writer.close()  # the footer goes into the spool
        self._writer = None
        return self._complete()

    def _complete(self) -> Path:
        """Get the finished file's bytes to disk, fsync, rename it into place (resumable after an error)."""
        assert self._file is not None
        final = self._file.commit(fsync=self.fsync)
        self._file = None
        self.files.append(final)
        log.debug("capture file complete: %s", final)
        return final

    def close(self) -> None:
        self.finish_file()

    def abort(self) -> None:
        """Drop the unfinished file and the rows not yet written (their records were never acknowledged)."""
        self._pending.clear()
        self._started = None
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        if self._file is not None:
            self._file.abort()
            self._file = None


class CaptureSink(Configured, Sink):
    """The ``capture`` sink: payloads as received, with subject, headers and timings, in Parquet.

    Parquet encoding and file I/O run on one background thread (so a consumer keeps
    reading while a row group is compressed), in the order the calls were made.
    """

    type = "capture"
    takes = PAYLOADS
    stage = "write"

    def __init__(self, folder: str | os.PathLike[str], **fields: Any) -> None:
        """``fields`` are ``CaptureSinkConfig``'s (``prefix``, ``max_file_size``, ``max_file_age``, ``fsync``...)."""
        self._init(CaptureSinkConfig, dir=os.fspath(folder), **fields)

    def _configure(self, config: CaptureSinkConfig) -> None:
        self.config = config
        self.writer = CaptureWriter.from_config(config)
        self.commit_records: int | None = None  # the run loop commits (completes a file) after this many, if set
        self._schema: Any = None
        self._next_seq = 0
        self._executor: ThreadPoolExecutor | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def params(self) -> dict[str, Any]:
        w = self.writer
        return {"dir": str(w.folder), "max_file_size": w.max_file_size, "max_file_age": w.max_file_age,
                "row_group_rows": w.row_group_rows}

    def worker_fields(self, worker: Worker) -> dict[str, Any]:
        """Each worker writes files of its own into the folder: ``<prefix>-w<index>-...``."""
        return {"prefix": worker.prefix(self.config.prefix)}

    def beside(self, suffix: str) -> str | None:
        """Next to the capture folder, not in it (a capture is read as every file of its folder)."""
        folder = self.writer.folder
        return str(folder.with_name(f"{folder.name}.{self.config.prefix}{suffix}"))

    @property
    def files(self) -> list[Path]:
        return self.writer.files

    @property
    def records(self) -> int:
        return self.writer.records

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="wirepipe-capture")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def open(self) -> None:
        folder = self.writer.folder
        check_writable(folder)
        report_unfinished(folder, f".{self.writer.prefix}-*{TEMP_SUFFIX}", "capture")
        self._schema = self.writer.schema()
        self._ticker = asyncio.get_running_loop().create_task(self._rotate_when_due())
        w = self.writer
        every = (f", or every {self.commit_records:,} records (each commit of the run loop completes the file)"
                 if self.commit_records else "")
        log.info("capturing into %s (a file is complete at about %s bytes, %gs after its first record%s)",
                 folder, f"{w.max_file_size:,}", w.max_file_age, every)

    async def _rotate_when_due(self) -> None:
        """Finish files by age even when no record arrives."""
        period = max(0.05, min(1.0, self.writer.max_file_age / 4))
        while True:
            await asyncio.sleep(period)
            if self.writer.due():
                await self._run(self.writer.rotate_if_due)

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        if self._schema is None:
            self._schema = self.writer.schema()
        table = capture_table(batch, self._next_seq, self._schema)
        self._next_seq += len(batch.values)
        await self._run(self.writer.append, table)

    async def flush(self) -> None:
        await self._run(self.writer.finish_file)

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        try:
            await self._run(self.writer.close)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


class CaptureSinkConfig(Strict):
    """``sink: {type: capture, dir: captures/blocks}``"""

    type: Literal["capture"]
    dir: str
    prefix: str = "capture"
    max_file_size: Size = Field(default=256 << 20, gt=0, description="rotate after about this many bytes")
    max_file_age: Duration = Field(default=60.0, gt=0, description="rotate a file this long after its first record")
    row_group_rows: int = Field(default=65536, ge=1, le=1 << 20,
                                description="rows per row group (10k-64k splits replays well)")
    row_group_size: Size = Field(default=64 << 20, gt=0, description="bytes per row group at most")
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"
    fsync: bool = True
    metadata: dict[str, str] = Field(default_factory=dict,
                                     description="noted in every file's wirepipe.capture metadata")

    @field_validator("prefix")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or "/" in v or os.sep in v or is_hidden(v):
            raise ValueError(f"prefix {v!r} must be a plain file name prefix (no '/', not starting with '.' "
                             "or '_': readers skip such files as hidden)")
        return v

    def build(self) -> CaptureSink:
        return CaptureSink.from_config(self)


# --- reading ---------------------------------------------------------------------------------------


def capture_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """The capture files named by files, folders (recursively, in name order) and globs, in capture order.

    Hidden files, among them the ``.inprogress`` files of a running capture, are skipped
    (``storage.find_files`` is the rule).
    """
    return find_files(paths, recursive=True, suffix=".parquet", what="capture file",
                      on_empty=lambda folder: f"{folder}: no capture files (*.parquet) in this folder")


@dataclass(frozen=True)
class RowGroup:
    """One row group of a capture file and where its first row stands in the whole capture."""

    path: str
    index: int
    rows: int
    position: int


def plan_row_groups(paths: str | Path | Iterable[str | Path],
                    unreadable: list[Unreadable] | None = None) -> list[RowGroup]:
    """Every row group of a capture, in capture order, from the file footers alone.

    A file whose footer cannot be read (truncated, not Parquet) raises ``WirepipeError``, or, given
    ``unreadable``, is added to it and left out of the plan.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: list[RowGroup] = []
    position = 0
    for path in capture_files(paths):
        try:
            meta = pq.ParquetFile(str(path)).metadata
        except (pa.ArrowInvalid, OSError) as exc:
            if unreadable is None:
                raise WirepipeError(f"{path}: not a readable Parquet file ({exc})") from None
            unreadable.append(Unreadable(str(path), None, None, f"not a readable Parquet file ({exc})"))
            log.error("%s: not a readable Parquet file (%s): replaying the other files", path, exc)
            continue
        names = set(meta.schema.to_arrow_schema().names)
        if "payload" not in names:
            raise WirepipeError(f"{path}: not a capture file (no payload column; columns: {', '.join(sorted(names))})")
        for i in range(meta.num_row_groups):
            rows = meta.row_group(i).num_rows
            out.append(RowGroup(str(path), i, rows, position))
            position += rows
    return out


def batch_from_arrow(rb: Any, position: int | list[int]) -> Batch:
    """Capture rows (an Arrow record batch or table) as a Batch like a NATS source yields; ``position`` is
    the first row's place in the capture (its ``seq``), or each row's when they are a slice.

    ``Wirepipe-Sent-At`` leaves the headers for ``meta["sent_ns"]``; headers that are the
    same for every record (the common case: one publisher) become one shared dict, so
    ``auto`` decoders pick one codec for the whole batch.
    """
    n = rb.num_rows
    names = rb.schema.names
    seqs = list(range(position, position + n)) if isinstance(position, int) else list(position)
    batch = Batch(rb.column("payload").to_pylist(), meta={"seq": seqs})
    if "subject" in names:
        batch.subjects = _subjects(rb.column("subject"))
    if "headers" in names:
        batch.headers = _headers(rb.column("headers"))
    for name in ("sent_ns", "received_ns", "stream_seq"):
        if name in names:
            col = rb.column(name)
            if name != "stream_seq" or col.null_count < n:
                batch.meta[name] = col.to_pylist()
    return batch


def _chunks(col: Any) -> Any:
    """A ChunkedArray (from a Table) as one Array; an Array as is."""
    import pyarrow as pa

    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _subjects(col: Any) -> list[str] | str | None:
    import pyarrow.compute as pc

    col = _chunks(col)
    n = len(col)
    if n == 0 or col.null_count == n:
        return None
    if col.null_count == 0 and pc.count_distinct(col).as_py() == 1:
        return col[0].as_py()
    return col.to_pylist()


def _headers(col: Any) -> list[dict[str, str] | None] | dict[str, str] | None:
    """Header maps without ``Wirepipe-Sent-At``: one shared dict when every record has the same ones."""
    import numpy as np
    import pyarrow.compute as pc

    col = _chunks(col)
    n = len(col)
    if n == 0 or col.null_count == n:
        return None
    offsets = col.offsets.to_numpy()
    base, end = int(offsets[0]), int(offsets[-1])
    offsets = offsets - base
    keys = col.keys.slice(base, end - base)
    items = col.items.slice(base, end - base)
    keep = pc.invert(pc.fill_null(pc.equal(keys, SENT_AT), False))
    kept = np.concatenate([[0], np.cumsum(keep.to_numpy(zero_copy_only=False))])
    lengths = kept[offsets[1:]] - kept[offsets[:-1]]
    if col.null_count == 0 and (lengths == lengths[0]).all():
        width = int(lengths[0])
        if width == 0:
            return None
        k = keys.filter(keep)
        v = items.filter(keep)
        ki = pc.dictionary_encode(k).indices.to_numpy().reshape(n, width)
        vi = pc.dictionary_encode(v).indices.to_numpy().reshape(n, width)
        if (ki == ki[0]).all() and (vi == vi[0]).all():
            return dict(zip(k.slice(0, width).to_pylist(), v.slice(0, width).to_pylist(), strict=True))
    key_list = keys.to_pylist()
    item_list = items.to_pylist()
    valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else None
    out: list[dict[str, str] | None] = []
    for i in range(n):
        if valid is not None and not valid[i]:
            out.append(None)
            continue
        a, b = offsets[i], offsets[i + 1]
        out.append({key: val for key, val in zip(key_list[a:b], item_list[a:b], strict=True) if key != SENT_AT})
    return out


class CaptureSource(Configured, Source):
    """Reads a capture in capture order, row group by row group, optionally at the original pace.

    ``pace="original"`` releases records at their recorded inter-arrival times (by
    ``received_ns``, or ``sent_ns`` with ``pace_by="sent"``) divided by ``speed``; gaps
    longer than ``max_gap`` seconds are shortened to it. A file or row group that cannot be
    read (a truncated file, a corrupt page) is gone past and listed in ``unreadable()`` (the run
    reports it and ends non-zero), unless ``stop_on_error``. Set after building: ``row_groups``
    restricts the read to a share of the capture (what a replay worker gets); ``pacer``
    overrides the pacing (a replay worker's, or one on a test clock). ``subject``, ``since`` and
    ``until`` read a slice: the records received on matching subjects in that time (each keeps its
    ``seq``, its place in the whole capture); ``count`` then takes the first N of the slice.
    """

    type = "capture"
    gives = PAYLOADS
    stage = "read"
    bounded = True  # replay --workers N splits row groups; a pool would read all of it N times

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``CaptureSourceConfig``'s (``batch_size``, ``count``, ``pace``, ``speed``...)."""
        self._init(CaptureSourceConfig, path=fspaths(path), **fields)

    def _configure(self, config: CaptureSourceConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.path = config.path
        self.batch_size = config.batch_size
        self.pace = config.pace
        self.speed = config.speed
        self.pace_by = config.pace_by
        self.max_gap = config.max_gap
        self.stop_on_error = config.stop_on_error
        self.row_groups: list[RowGroup] | None = None
        self.pacer: Any = None
        self._unreadable: list[Unreadable] = []

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.path, "batch_size": self.batch_size, "count": self.count, "pace": self.pace,
                "speed": self.speed}

    def check_input(self) -> None:
        if self.row_groups is None:
            capture_files(self.path)

    def plan(self) -> list[RowGroup]:
        if self.row_groups is None:
            self.row_groups = plan_row_groups(self.path, None if self.stop_on_error else self._unreadable)
        return self.row_groups

    def unreadable(self) -> list[Unreadable]:
        return list(self._unreadable)

    async def batches(self) -> AsyncIterator[Batch]:
        import pyarrow.parquet as pq

        pacer = self.pacer
        if pacer is None and self.pace == "original":
            from .pacing import Pacer

            pacer = self.pacer = Pacer(speed=self.speed, max_gap=self.max_gap)
        files: dict[str, Any] = {}
        for group in self.plan():
            pf = files.get(group.path)
            if pf is None:
                files.clear()
                pf = files[group.path] = pq.ParquetFile(group.path)
            reader = pf.iter_batches(batch_size=self.batch_size, row_groups=[group.index])
            position = group.position
            left = group.rows  # a plan cut at a count reads a row group in part
            while left > 0:
                # Parquet decoding releases the GIL: overlap it with the operators downstream.
                try:
                    rb = await asyncio.to_thread(next, reader, None)
                except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
                    why = f"cannot be read (a corrupt file?): {describe_error(exc)}"
                    if self.stop_on_error:
                        raise WirepipeError(f"{group.path}: row group {group.index} {why}") from None
                    self._unreadable.append(Unreadable(group.path, group.index, left, why))
                    log.error("%s: row group %d %s: %d records not read; replaying the rest", group.path,
                              group.index, why, left)
                    files.clear()  # the next row group opens the file afresh
                    break
                if rb is None:
                    break
                if rb.num_rows > left:
                    rb = rb.slice(0, left)
                left -= rb.num_rows
                rows, seqs = self._selected(rb, position)
                if pacer is None:
                    if rows.num_rows:
                        yield batch_from_arrow(rows, seqs)
                else:
                    for start, stop, due in pacer.schedule(pace_column(rows, self.pace_by)):
                        if not await pacer.wait(due, self.stopping):
                            return
                        yield batch_from_arrow(rows.slice(start, stop - start),
                                               position + start if isinstance(seqs, int) else seqs[start:stop])
                position += rb.num_rows
                if self.stopping.is_set():
                    return


    def _selected(self, rb: Any, position: int) -> tuple[Any, int | list[int]]:
        """The rows of the slice (``subject``, ``since``, ``until``) and their positions in the capture:
        the first one's (all rows kept) or each one's."""
        config = self.config
        if config.subject is None and config.since is None and config.until is None:
            return rb, position
        import pyarrow as pa
        import pyarrow.compute as pc

        names = rb.schema.names
        keep = pa.array([True] * rb.num_rows)
        if config.subject is not None:
            if "subject" not in names:
                return rb.slice(0, 0), []
            pattern = "^(?:" + subject_regex(config.subject) + ")$"
            keep = pc.and_(keep, pc.fill_null(pc.match_substring_regex(rb.column("subject"), pattern), False))
        for bound, compare in ((config.since, pc.greater_equal), (config.until, pc.less)):
            if bound is None:
                continue
            if "received_ns" not in names:
                return rb.slice(0, 0), []
            ns = pa.scalar(_epoch_ns(bound), pa.int64())
            keep = pc.and_(keep, pc.fill_null(compare(rb.column("received_ns"), ns), False))
        index = pc.indices_nonzero(keep).to_pylist()
        return rb.take(pa.array(index, pa.int64())), [position + i for i in index]


def _epoch_ns(when: dt.datetime) -> int:
    """ns since the epoch; a time without a zone is UTC (as ``--from-time`` reads it)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000


def pace_column(rb: Any, pace_by: str) -> Any:
    """The timestamps to pace by: ``received_ns`` (or ``sent_ns``), the other one where it is missing."""
    import pyarrow.compute as pc

    first, second = ("sent_ns", "received_ns") if pace_by == "sent" else ("received_ns", "sent_ns")
    names = rb.schema.names
    col = rb.column(first) if first in names else None
    if col is None or col.null_count:
        other = rb.column(second) if second in names else None
        if col is None:
            col = other
        elif other is not None:
            col = pc.coalesce(col, other)
    if col is None:
        raise WirepipeError("the capture has neither received_ns nor sent_ns: it cannot be paced (use --pace max)")
    return col


class CaptureSourceConfig(SourceLimits):
    """``source: {type: capture, path: captures/blocks, pace: original, speed: 2}``"""

    type: Literal["capture"]
    path: str | list[str]
    batch_size: int = Field(default=8192, ge=1)
    pace: Literal["max", "original"] = "max"
    speed: float = Field(default=1.0, gt=0, description="with pace: original, how many times faster than recorded")
    pace_by: Literal["received", "sent"] = "received"
    max_gap: Duration | None = Field(default=None, description="with pace: original, shorten longer pauses to this")
    subject: str | None = Field(default=None, description="only the records received on subjects this pattern "
                                "matches (NATS wildcards: orders.*.eu, orders.>)")
    since: dt.datetime | None = Field(default=None, description="only the records received at or after this time "
                                      "(ISO 8601; without a zone, UTC)")
    until: dt.datetime | None = Field(default=None, description="only the records received before this time")

    @field_validator("subject")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        if v is not None:
            subject_regex(v)
        return v
    stop_on_error: bool = Field(default=False, description="stop at the first file or row group that cannot be "
                                "read; default: read every readable one, list the others, end non-zero")

    def build(self) -> CaptureSource:
        return CaptureSource.from_config(self)


SOURCES = {"capture": CaptureSourceConfig}
SINKS = {"capture": CaptureSinkConfig}
RANK = 4  # where its types come in the "allowed" lists (connectors/__init__.py)
