"""The ``capture`` sink: payloads as received, with subject, headers and timings, in rotating Parquet files.

The rows are the capture format's (``capture_format.py``). Files live the one Parquet file
life (``storage/lifecycle.py``): written under a hidden ``.NAME.PID.inprogress`` name and
renamed when complete (footer written and fsynced), so a reader listing the folder never
sees a half-written file. They rotate by size and by age and are named so that name order
is capture order (``capture-<UTC start time>-<n>.parquet``). Row groups hold up to
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
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from ..core.batch import PAYLOADS, Batch, describe_error
from ..core.errors import SinkUnavailable
from ..core.models import Duration, Size, Strict
from ..core.stages import Stage
from ..core.workers import Worker
from ..storage.files import TEMP_SUFFIX, AtomicFile, TableBuffer, is_hidden
from ..storage.lifecycle import ParquetFileWriter, RollingParquetFiles
from .capture_format import CAPTURE_COLUMNS, FORMAT_VERSION, capture_schema, capture_table
from .connector import Configured, Sink, WritesFiles

log = logging.getLogger("wirepipe.capture")


class CaptureWriter(Configured):
    """Writes capture rows into rotating Parquet files (synchronous; the sink runs it in a thread).

    Rows accumulate until a row group is full (``row_group_rows`` rows or ``row_group_size``
    bytes); a file is finished (footer, fsync, rename) when it reaches ``max_file_size``
    bytes or ``max_file_age`` seconds, on ``finish_file()`` and on ``close()``. Its settings are
    the capture sink's (``CaptureSinkConfig``); ``clock`` (a test's) measures file age.
    """

    clock: Callable[[], float]
    config: CaptureSinkConfig

    def __init__(self, folder: str | os.PathLike[str], *, clock: Callable[[], float] = time.monotonic,
                 **fields: Any) -> None:
        """``fields`` are ``CaptureSinkConfig``'s (``prefix``, ``max_file_size``, ``row_group_rows``, ``fsync``...)."""
        self._init(CaptureSinkConfig, dir=os.fspath(folder), **fields)
        self.clock = clock

    def _configure(self, config: CaptureSinkConfig) -> None:
        self.config = config
        self.clock = time.monotonic
        self.folder = Path(config.dir)
        self.records = 0  # rows appended so far (the next row's seq)
        self._pending = TableBuffer()
        self._out = RollingParquetFiles(self.folder, leftovers=f".{config.prefix}-*{TEMP_SUFFIX}", what="capture",
                                        fsync=config.fsync)
        self._started: float | None = None  # when the current file got its first row
        self._index = 0
        self._last_stamp = ""
        self._failed: BaseException | None = None  # writing failed; finish_file retries (and says so)

    @property
    def files(self) -> list[Path]:
        """The completed files, in order."""
        return self._out.files

    def start(self) -> None:
        """Before the first file: the folder must take files; what a capture that did not stop cleanly left
        is named."""
        self._out.start()

    def schema(self) -> Any:
        from importlib.metadata import version

        info = {"format": FORMAT_VERSION, "writer": f"wirepipe {version('wirepipe')}",
                "columns": CAPTURE_COLUMNS, "metadata": self.config.metadata}
        return capture_schema({"wirepipe.capture": json.dumps(info, default=str)})

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
            if self._failed is None and (self.due() or self._size() >= self.config.max_file_size):
                self._finish()
        except OSError as exc:
            self._note_failure(exc)

    def _note_failure(self, exc: BaseException) -> None:
        if self._failed is None:
            log.error("capture: writing into %s failed (%s): holding the records, retrying", self.folder, exc)
        self._failed = exc

    def due(self) -> bool:
        """The current file is older than ``max_file_age``."""
        return self._started is not None and self.clock() - self._started >= self.config.max_file_age

    def rotate_if_due(self) -> None:
        """Complete the current file if it is old enough (a failure stays for ``finish_file`` to report)."""
        if self._failed is None and self.due():
            try:
                self._finish()
            except OSError as exc:
                self._note_failure(exc)

    def _size(self) -> int:
        current = self._out.current
        return (current.nbytes if current is not None else 0) + self._pending.nbytes

    def _group_rows(self) -> int:
        """Rows per row group: ``row_group_rows``, fewer when their bytes would pass ``row_group_size``."""
        rows = self.config.row_group_rows
        if not self._pending.rows:
            return rows
        per_row = max(1.0, self._pending.nbytes / self._pending.rows)
        return max(1, min(rows, int(self.config.row_group_size // per_row)))

    def _write_row_groups(self, *, final: bool) -> None:
        """Write pending rows as full row groups; the rest waits for more rows unless ``final``."""
        if not self._pending:
            return
        step = self._group_rows()
        file = self._open()  # before the rows leave _pending: a file that cannot be created keeps them
        n, table = self._pending.leading_run()  # capture rows share one schema: all of them
        full = table.num_rows if final else table.num_rows // step * step
        if full:
            for start in range(0, full, step):
                file.write(table.slice(start, min(step, full - start)), row_group_size=step)
        self._pending.consume(n, rest=table.slice(full))

    def _open(self) -> ParquetFileWriter:
        """The file being written, or a new one (the one before finalized first: raises while it cannot be)."""
        if self._out.current is not None:
            return self._out.current
        self._out.finalize()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 1_000_000:06d}Z"
        stamp = self._last_stamp = max(stamp, self._last_stamp)  # names keep capture order if the clock steps back
        while True:
            self._index += 1
            final = self.folder / f"{self.config.prefix}-{stamp}-{self._index:05d}.parquet"
            if AtomicFile.free(final):
                break
        return self._out.open(final, self.schema(), compression=self.config.compression)

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
        done = self._out.finalize()  # a file finished before, not all on disk yet: its rows come first
        self._write_row_groups(final=True)
        self._started = None
        done = self._out.finish() or done
        if done is not None:
            log.debug("capture file complete: %s", done)
        return done

    def close(self) -> None:
        self.finish_file()

    def abort(self) -> None:
        """Drop the unfinished file and the rows not yet written (their records were never acknowledged)."""
        self._pending.clear()
        self._started = None
        self._out.abort()


class CaptureSink(Configured, Sink, WritesFiles):
    """The ``capture`` sink: payloads as received, with subject, headers and timings, in Parquet.

    Parquet encoding and file I/O run on one background thread (so a consumer keeps
    reading while a row group is compressed), in the order the calls were made.
    """

    type = "capture"
    takes = PAYLOADS
    stage = Stage.WRITE
    config: CaptureSinkConfig

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
        config = self.config
        return {"dir": str(self.writer.folder), "max_file_size": config.max_file_size,
                "max_file_age": config.max_file_age, "row_group_rows": config.row_group_rows}

    def for_worker(self, index: int, count: int) -> CaptureSink:
        """Each worker writes files of its own into the folder: ``<prefix>-w<index>-...``."""
        return self.reconfigured(prefix=Worker(index, count).prefix(self.config.prefix))

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
        self.writer.start()
        self._schema = self.writer.schema()
        self._ticker = asyncio.get_running_loop().create_task(self._rotate_when_due())
        config = self.config
        every = (f", or every {self.commit_records:,} records (each commit of the run loop completes the file)"
                 if self.commit_records else "")
        log.info("capturing into %s (a file is complete at about %s bytes, %gs after its first record%s)",
                 folder, f"{config.max_file_size:,}", config.max_file_age, every)

    async def _rotate_when_due(self) -> None:
        """Finish files by age even when no record arrives."""
        period = max(0.05, min(1.0, self.config.max_file_age / 4))
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
    dir: str = Field(description="the folder of the capture files")
    prefix: str = Field(default="capture", description="file names: <prefix>-<UTC start time>-<n>.parquet, so "
                        "name order is capture order")
    max_file_size: Size = Field(default=256 << 20, gt=0, description="rotate after about this many bytes")
    max_file_age: Duration = Field(default=60.0, gt=0, description="rotate a file this long after its first record")
    row_group_rows: int = Field(default=65536, ge=1, le=1 << 20,
                                description="rows per row group (10k-64k splits replays well)")
    row_group_size: Size = Field(default=64 << 20, gt=0, description="bytes per row group at most")
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = Field(
        default="zstd", description="Parquet compression of the columns")
    fsync: bool = Field(default=True, description="fsync a file (and its folder) before it gets its name")
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


SINKS = {"capture": CaptureSinkConfig}
RANK = 6  # where its types come in the "allowed" lists (connectors/__init__.py)
