"""Crash-safe Parquet datasets: a folder of complete part files, compacted as it grows.

A Parquet file is only readable once its footer is written, and ``ParquetWriter``
writes the footer on ``close``: a worker killed with SIGKILL leaves a file no reader
can open. So a long-lived writer never appends to one file. Each flush becomes one
complete Parquet file, living the one Parquet file life (``storage/lifecycle.py``: a hidden
temporary name, renamed into place once finalized), so at every instant the folder holds only
whole files and a kill loses at most the rows not yet flushed; the temporary files a killed
writer left are deleted by the next one. The encoding and writing happen on a background
thread, off the pipeline's hot path. A full disk delays the parts and loses none
(``PartWriter``).

Files are named ``part-<run>-<first>-<last>.parquet``: ``first``..``last`` are the
flush numbers the file holds. Small parts are merged in the background, LSM style:
when the newest ``compact_parts`` files of a run share a level they are rewritten as
one file of the next level (up to ``max_file_rows`` rows), so a worker that flushes
every few seconds for days keeps a few dozen files, and each row is rewritten only a
handful of times. A merge writes its output first and deletes its inputs second: a
kill in between leaves a file whose flush range covers others of the same run;
``list_parts`` skips the covered ones (and the next writer on the folder deletes
them), so a reader never counts a row twice. Plain readers (DuckDB, pyarrow,
Spark) read the folder as a dataset; docs/how-to/read-metrics.md has the one-line queries.

Durability is against a process kill, not a power loss: files are not fsynced.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.backoff import ExponentialBackoff, Outage
from ..core.errors import WirepipeError
from .files import TEMP_SUFFIX, delete_unfinished, folder_files
from .lifecycle import ParquetFileWriter, write_parquet

_FIRST_WAIT = 0.1  # seconds before the first retry of a part the disk refused (the sinks' waits)
_MAX_WAIT = 5.0  # seconds between retries at most
_REPORT_EVERY = 30.0  # seconds between two log lines about one outage
PART = re.compile(r"^part-(?P<run>[A-Za-z0-9_.-]+?)-(?P<first>\d{6,})-(?P<last>\d{6,})\.parquet$")
_MERGE_ROW_GROUP = 65536
log = logging.getLogger("wirepipe")


@dataclass
class Part:
    """One complete file of a run: the flushes it holds, its merge level and its rows."""

    path: Path
    run: str
    first: int
    last: int
    rows: int = 0
    level: int = 0

    @classmethod
    def parse(cls, path: Path) -> Part | None:
        m = PART.match(path.name)
        if m is None:
            return None
        return cls(path, m["run"], int(m["first"]), int(m["last"]))

    def covers(self, other: Part) -> bool:
        return (self.run == other.run and self is not other and self.first <= other.first
                and other.last <= self.last and (self.first, self.last) != (other.first, other.last))


def part_name(run: str, first: int, last: int) -> str:
    return f"part-{run}-{first:06d}-{last:06d}.parquet"


def check_folder(folder: Path) -> None:
    """Refuse a path that exists as a regular file (a single results file, a typo)."""
    if folder.exists() and not folder.is_dir():
        raise WirepipeError(f"{folder} is a file, but results are written as a folder of Parquet parts: "
                            f"choose another path or move the file away")


def list_parts(folder: str | Path) -> list[Path]:
    """The complete Parquet files of a dataset folder, in run and flush order, without covered parts.

    Files that do not follow the part naming (copied in by hand, written by another
    tool) are listed too; hidden and temporary files are not (``storage.folder_files``).
    """
    files = folder_files(Path(folder), suffix=".parquet")
    parts = [Part.parse(p) for p in files]
    named = [p for p in parts if p is not None]
    covered = {q.path for p in named for q in named if p.covers(q)}
    return [p for p in files if p not in covered]


def clean_folder(folder: Path) -> None:
    """Delete what a killed writer left: parts covered by a merge, temporaries of dead processes."""
    parts = [p for p in (Part.parse(f) for f in folder.glob("part-*.parquet")) if p is not None]
    for q in {q.path for p in parts for q in parts if p.covers(q)}:
        with contextlib.suppress(FileNotFoundError):
            q.unlink()
    delete_unfinished(folder, f".part-*{TEMP_SUFFIX}")


class PartWriter:
    """Writes one run's tables into a dataset folder as atomic part files, merging small ones.

    ``write`` only queues the table: a background thread encodes and writes it (Parquet
    encoding and compression release the GIL, so the pipeline's thread keeps running)
    and does the merges, so all file work happens in one thread, in order. ``finish``
    hands over the end of the run (the tail of the run is merged: a short run ends as one
    file), ``join`` waits for it, ``close`` does both and raises the first error the writer
    met, if any. The thread starts at the first ``write``: a run whose rows all arrive with
    ``finish(last)`` (a short run) is written by the closing thread, with nothing left to
    keep off (measured: starting and joining a thread for that one file cost a 0.2 s run
    1-3% on a busy 2-core machine).

    A full disk delays parts, it never drops them. A part is written into its file's spool
    and finalized (``storage/lifecycle.py``); while the disk refuses (any ``OSError``: full,
    over quota, read-only) the writer waits the sinks' waits (``core/backoff.py``'s
    ``Outage``: reported at once, every 30 s and when it works again) and finalizes it again,
    going on where it stopped, each row written once; the parts after it wait in the queue,
    in memory. ``errors`` counts the failed tries, ``rows_delayed`` the rows held while the
    disk refused. The caller never waits for room: a closing thread that meets a full disk
    hands the rest to a writer thread. ``stop_waiting`` (a run cancelled past its deadline)
    gives every part left one more try and counts what the disk still refuses in
    ``rows_unwritten``. A merge that meets a full disk is dropped (its inputs stay, whole)
    and tried again later.
    """

    def __init__(self, folder: str | Path, run: str, schema: Any, *, compact_parts: int = 16,
                 max_file_rows: int = 1_000_000, compression: str = "zstd",
                 part_compression: str = "snappy") -> None:
        self.folder = Path(folder)
        self.run = run
        self.schema = schema
        self.compact_parts = compact_parts
        self.max_file_rows = max_file_rows
        self.compression = compression  # merged files: the ones that last
        # A flush's own part is small and soon merged: zstd's set-up per column chunk cost a 1,200-row
        # part 1.5 ms against snappy's 0.8 ms, for 6.9 KB against 7.8 KB.
        self.part_compression = part_compression
        # Dictionary pages for the text columns only (run id, stage, operator: a handful of values each);
        # the numbers (batch index, clock readings) are mostly distinct, where a dictionary is work for
        # nothing (a 1,200-row part: 1.03 ms to write without them against 1.21 ms with, and 6% smaller).
        self._dictionary = [f.name for f in schema if str(f.type) in ("string", "large_string")]
        self.parts: list[Part] = []
        self.error: BaseException | None = None  # the first error that is not the disk's (then rows are dropped)
        self.outage = Outage(ExponentialBackoff(first=_FIRST_WAIT, cap=_MAX_WAIT), report_every=_REPORT_EVERY)
        self.errors = 0  # failed tries to write a part (each tried again)
        self.rows_delayed = 0  # rows held in memory while the disk refused (each counted once)
        self.rows_unwritten = 0  # rows given up after ``stop_waiting``
        self._next = 0
        self._queued_rows = 0  # rows handed to ``write`` (the caller's count)
        self._done_rows = 0  # rows written or given up (the writer's count)
        self._counted_rows = 0  # rows up to here are counted in ``rows_delayed``
        self._current: tuple[Part, Any] | None = None  # the part being written and its table
        self._file: ParquetFileWriter | None = None  # its file, once open
        self._patient = True
        self._inline = False  # the closing thread writes: it never waits for room
        self._wake = threading.Event()
        self._finished = threading.Event()
        check_folder(self.folder)
        self._tidied = self._tidy()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @property
    def failing(self) -> str | None:
        """The disk's error while it refuses the parts, else None."""
        return self.outage.error

    @property
    def rows_held(self) -> int:
        """Rows handed over and not yet written (queued, or in a part that waits for room)."""
        return self._queued_rows - self._done_rows

    def write(self, table: Any) -> None:
        """Queue ``table`` as the run's next part."""
        if self._thread is None:
            self._start()
        self._queued_rows += table.num_rows
        self._queue.put(table)

    def finish(self, last: Any = None) -> None:
        """Queue ``last`` (when given) and the end of the run. Without a writer thread the calling thread writes
        them while the disk takes them; what must wait for room goes to a writer thread (``join`` waits)."""
        if last is not None:
            self._queued_rows += last.num_rows
            self._queue.put(last)
        self._queue.put(None)
        if self._thread is not None:
            return
        self._inline = True
        try:
            self._work()
        except _Handover as wait:
            self._inline = False
            self._start(wait.seconds)
        finally:
            self._inline = False

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the end of the run is written (or given up); False when ``timeout`` passed first."""
        return self._finished.wait(timeout)

    def close(self, last: Any = None) -> None:
        """``finish`` and ``join`` (waiting for room as long as the disk refuses); raise the first error, if any."""
        self.finish(last)
        self.join()
        self.raise_error()

    def raise_error(self) -> None:
        """Raise the first error the writer met that is not the disk's (a full disk waits, it does not fail)."""
        if self.error is not None:
            raise WirepipeError(f"writing results to {self.folder} failed: {self.error}") from self.error

    def stop_waiting(self) -> None:
        """Wait for room no more: every part left gets one more try, what the disk refuses is counted in
        ``rows_unwritten`` (and its temporary file deleted)."""
        self._patient = False
        self._wake.set()

    # --- the writer thread (or the closing one) --------------------------------------------------

    def _start(self, wait: float = 0.0) -> None:
        def work() -> None:
            if wait:
                self._wake.wait(wait)
                self._wake.clear()
            self._work()

        self._thread = threading.Thread(target=work, name=f"wirepipe-parts-{self.run}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            if self._current is None:
                table = self._queue.get()
                if table is None:
                    self._end()
                    return
                if self.error is not None:  # keep draining so the pipeline never blocks on us
                    self._done_rows += table.num_rows
                    continue
                n = self._next
                self._next += 1
                self._current = Part(self.folder / part_name(self.run, n, n), self.run, n, n, table.num_rows), table
            try:
                self._write_current()
                while (group := self._due()) is not None and self._merge(group):
                    pass
            except _GaveUp:
                self._drop_current(unwritten=True)
            except _Handover:
                raise
            except Exception as exc:
                log.error("writing results to %s failed: %s", self.folder, exc)
                self.error = exc
                self._drop_current()

    def _write_current(self) -> None:
        """The current part, until the disk takes it (``_attempt``)."""
        assert self._current is not None
        part = self._current[0]
        self._attempt(self._try_current)
        self._file = self._current = None
        self.parts.append(part)
        self._done_rows += part.rows

    def _try_current(self) -> None:
        """One try: the part's file is opened with its table in it (its spool: no room needed yet) once, then
        finalized, going on where the last try stopped."""
        assert self._current is not None
        part, table = self._current
        if self._file is None:
            if not self._tidied:
                self._tidied = self._tidy(strict=True)
            file = ParquetFileWriter(part.path, self.schema, compression=self.part_compression, fsync=False,
                                     use_dictionary=self._dictionary)  # not fsynced: see the module doc
            try:
                file.write(table)
            except BaseException:
                file.abort()
                raise
            self._file = file
        self._file.finalize()

    def _tidy(self, strict: bool = False) -> bool:
        """Make the folder and delete what a killed writer left (``clean_folder``); False when the disk
        refused (it is done before the first part then), unless ``strict``."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            clean_folder(self.folder)
        except OSError:
            if strict:
                raise
            return False
        return True

    def _drop_current(self, unwritten: bool = False) -> None:
        if self._file is not None:
            self._file.abort()
        if self._current is not None:
            rows = self._current[0].rows
            self._done_rows += rows
            if unwritten:
                self.rows_unwritten += rows
        self._file = self._current = None

    def _attempt(self, action: Callable[[], None]) -> None:
        """``action`` until the disk takes it (see the class doc)."""
        while True:
            try:
                action()
            except OSError as exc:
                self.errors += 1
                self.rows_delayed += self._queued_rows - max(self._done_rows, self._counted_rows)
                self._counted_rows = max(self._counted_rows, self._queued_rows)
                wait, report = self.outage.failed(exc.strerror or str(exc), exc)
                if report:
                    log.error("results for %s wait for room: %s (for %.0fs, %d failures; holding %d rows in memory, "
                              "retrying)", self.folder, self.outage.error, self.outage.lasted, self.outage.failures,
                              self.rows_held)
                if not self._patient:
                    raise _GaveUp from exc
                if self._inline:
                    raise _Handover(wait) from exc
                self._wake.wait(wait)
                self._wake.clear()
                continue
            failures = self.outage.failures
            lasted = self.outage.recovered()
            if lasted is not None:
                log.warning("results for %s written again after %.1fs and %d failure(s)", self.folder, lasted,
                            failures)
            return

    def _end(self) -> None:
        """The end of the run: merge its tail, then say it is finished."""
        if self.rows_unwritten:
            log.error("results for %s: %d row(s) not written: the disk still refused them when the run was stopped "
                      "(%s)", self.folder, self.rows_unwritten, self.outage.error)
        try:
            if self.error is None and self.outage.error is None:  # no merge into a disk that refuses its parts
                self._merge_tail()
        except Exception as exc:
            log.error("writing results to %s failed: %s", self.folder, exc)
            self.error = exc
        finally:
            self._finished.set()

    def _due(self) -> list[Part] | None:
        """The newest ``compact_parts`` files when they share a level and fit in one file."""
        k = self.compact_parts
        if k < 2 or len(self.parts) < k:
            return None
        group = self.parts[-k:]
        level = group[-1].level
        if any(p.level != level for p in group) or sum(p.rows for p in group) > self.max_file_rows:
            return None
        return group

    def _merge_tail(self) -> None:
        """Merge the newest parts, as many as fit in one file, so a short run ends as one file."""
        tail: list[Part] = []
        rows = 0
        for p in reversed(self.parts):
            if tail and rows + p.rows > self.max_file_rows:
                break
            tail.insert(0, p)
            rows += p.rows
        if len(tail) > 1:
            self._merge(tail)

    def _merge(self, group: list[Part]) -> bool:
        """Rewrite ``group`` as one file of the next level; False when the disk refused it (nothing changed)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        first, last = group[0].first, group[-1].last
        merged = Part(self.folder / part_name(self.run, first, last), self.run, first, last,
                      sum(p.rows for p in group), max(p.level for p in group) + 1)

        def copy(file: ParquetFileWriter) -> None:
            pending: list[Any] = []
            rows = 0
            for p in group:
                for rb in pq.ParquetFile(p.path).iter_batches(batch_size=_MERGE_ROW_GROUP):
                    pending.append(rb)
                    rows += rb.num_rows
                    if rows >= _MERGE_ROW_GROUP:
                        file.write(pa.Table.from_batches(pending, schema=self.schema))
                        pending, rows = [], 0
            if pending:
                file.write(pa.Table.from_batches(pending, schema=self.schema))

        try:
            write_parquet(merged.path, self.schema, copy, compression=self.compression,
                          use_dictionary=self._dictionary, fsync=False)  # not fsynced: see the module doc
        except OSError as exc:  # aborted: its inputs are whole, merged at the next chance
            log.debug("merging results in %s put off: %s", self.folder, exc)
            return False
        i = self.parts.index(group[0])
        self.parts[i:i + len(group)] = [merged]
        for p in group:  # after the rename: a kill here leaves covered parts, which readers skip
            with contextlib.suppress(FileNotFoundError):
                p.path.unlink()
        return True


class _Handover(Exception):
    """The closing thread met a full disk: a writer thread goes on after ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


class _GaveUp(Exception):
    """``stop_waiting``: the disk still refused a part."""
