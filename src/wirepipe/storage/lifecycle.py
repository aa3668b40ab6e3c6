"""The life of a Parquet file that wirepipe writes: open, write, close, finalize.

A Parquet file is readable only once its footer is written, so a reader must never see one
before. Every Parquet writer that outlives a call (the ``parquet`` sink, capture files,
metrics parts) gives its files one life, the one Beam's ``FileBasedSink`` gives them:

- **open** (``ParquetFileWriter``): a ``ParquetWriter`` over an ``AtomicFile``, under the hidden
  temporary name ``.NAME.PID.inprogress``. The writer's process id is in the name because a pool's
  workers write into one folder: the next writer tells a dead one's leftovers from a live one's.
  Given a ``filesystem`` (Beam's ``FileSystems``: a Beam worker's parts on ``gs://``, ``s3://``, HDFS),
  over a ``FileSystemFile`` instead, committed that filesystem's way.
- **write**: row groups go into the file's ``SpoolingFile``: a write never fails, a full disk keeps
  what does not fit in memory.
- **close**: the footer goes into the spool. The file is complete, not yet on disk.
- **finalize**: its bytes to disk (fsynced when asked), renamed into place. While the disk is full
  this raises the ``OSError``; called again, it goes on where it stopped: each row is written once,
  and no file is dropped and written again.
- **abort**: the file goes (its rows were never acknowledged).

``RollingParquetFiles`` is a writer's files one after another in one folder: one being written, at
most one closed and waiting for room on the disk, and the finished ones, in order. The next file
opens only once the one before is finalized, so files finish in the order they were written. At
start it names what a writer that did not stop cleanly left (``storage.files.report_unfinished``).
``write_parquet`` is the whole life at once, for a file written in one go (``write_table``: a table as a
file); ``parquet_bytes`` a file's
bytes in memory, never on disk (``wirepipe plan`` times what a Parquet sink's write costs with it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import FileSystem, atomic_file, report_unfinished
from .spool import check_writable


class ParquetFileWriter:
    """One Parquet file, opened under its temporary name: ``write`` row groups, ``close``, ``finalize``.

    ``options`` go to ``pyarrow.parquet.ParquetWriter`` (``use_dictionary``...); ``filesystem`` writes it
    through another filesystem than the local disk (``storage.files.FileSystem``), ``final`` then a path of it.
    ``owner`` names the temporary file's writer: this process by default.
    """

    def __init__(self, final: str | Path, schema: Any, *, compression: str = "zstd", fsync: bool = True,
                 filesystem: FileSystem | None = None, owner: str | int | None = None, **options: Any) -> None:
        import pyarrow.parquet as pq

        self.schema = schema
        self.fsync = fsync
        self._atomic = atomic_file(final, owner=os.getpid() if owner is None else owner, filesystem=filesystem)
        try:
            self._writer: Any = pq.ParquetWriter(self._atomic.file, schema, compression=compression, **options)
        except BaseException:
            self._atomic.abort()
            raise

    @property
    def final(self) -> Path | str:
        return self._atomic.final

    @property
    def temp(self) -> Path | str:
        return self._atomic.temp

    @property
    def nbytes(self) -> int:
        """Bytes written so far, on disk or spooled (the footer included once closed)."""
        return self._atomic.file.tell()

    @property
    def closed(self) -> bool:
        return self._writer is None

    def write(self, table: Any, row_group_size: int | None = None) -> None:
        """``table`` as row groups of ``row_group_size`` rows (pyarrow's default when None), into the spool."""
        self._writer.write_table(table, row_group_size=row_group_size)

    def drain(self) -> None:
        """Get what was written so far into the temporary file (raises while the disk is full; resumes)."""
        self._atomic.drain()

    def close(self) -> None:
        """Write the footer (into the spool: no room is needed yet)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def finalize(self) -> Path | str:
        """Close, get every byte to disk (fsynced when ``fsync``), rename into place; returns the final path.

        After an ``OSError`` (a full disk) call it again: it resumes, and a rename that went
        through is not redone.
        """
        self.close()
        return self._atomic.commit(fsync=self.fsync)

    def abort(self) -> None:
        """Drop the file, finished or not."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):  # its bytes are dropped anyway
                writer.close()
        self._atomic.abort()


def write_parquet(final: str | Path, schema: Any, fill: Callable[[ParquetFileWriter], None], *,
                  compression: str = "zstd", fsync: bool = False, filesystem: FileSystem | None = None,
                  owner: str | int | None = None, **options: Any) -> Path | str:
    """A whole Parquet file at once: ``fill(file)`` writes its rows, then it is finalized (aborted on any error);
    through ``filesystem``, by ``owner``, when given (``ParquetFileWriter``)."""
    file = ParquetFileWriter(final, schema, compression=compression, fsync=fsync, filesystem=filesystem, owner=owner,
                             **options)
    try:
        fill(file)
        return file.finalize()
    except BaseException:
        file.abort()
        raise


def write_table(final: str | Path, table: Any, **options: Any) -> Path | str:
    """``table`` as the whole Parquet file ``final`` (``write_parquet``; ``options`` as its)."""
    return write_parquet(final, table.schema, lambda file: file.write(table), **options)


def parquet_bytes(table: Any, *, compression: str = "zstd", **options: Any) -> bytes:
    """``table`` as the bytes of one Parquet file, in memory: what a file of it would hold."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    writer = pq.ParquetWriter(sink, table.schema, compression=compression, **options)
    writer.write_table(table)
    writer.close()
    return sink.getvalue().to_pybytes()


class RollingParquetFiles:
    """A writer's Parquet files in one folder, finished one after another.

    ``leftovers`` is a glob of the temporary names its files take (what ``start`` looks for,
    e.g. ``.capture-*.inprogress``); ``what`` names them in the warning.
    """

    def __init__(self, folder: str | Path, *, leftovers: str, what: str, fsync: bool = True) -> None:
        self.folder = Path(folder)
        self.leftovers = leftovers
        self.what = what
        self.fsync = fsync
        self.files: list[Path] = []  # finished, in order
        self.current: ParquetFileWriter | None = None  # being written
        self._waiting: ParquetFileWriter | None = None  # closed, not yet finalized (its disk was full)

    def start(self) -> list[Path]:
        """Make the folder and check that it takes files (an unwritable output fails at start, not at
        the first flush); name the unfinished files of a writer that did not stop cleanly."""
        check_writable(self.folder)
        return report_unfinished(self.folder, self.leftovers, self.what)

    def open(self, final: str | Path, schema: Any, **options: Any) -> ParquetFileWriter:
        """Start the next file (``options`` as ``ParquetFileWriter``'s); the ones before are finished first."""
        self.finish()
        self.current = ParquetFileWriter(final, schema, fsync=self.fsync, **options)
        return self.current

    def finalize(self) -> Path | None:
        """Finalize the file waiting for room, if any; returns its final path. Raises while it cannot."""
        file = self._waiting
        if file is None:
            return None
        path = Path(file.finalize())  # a local file: this folder's
        self._waiting = None
        self.files.append(path)
        return path

    def finish(self) -> Path | None:
        """Close the file being written and finalize it (a waiting one first); returns the newest finished
        path, None when there was nothing to finish. Raises while the disk is full: call it again."""
        done = self.finalize()
        if self.current is not None:
            self.current.close()
            self._waiting, self.current = self.current, None
            done = self.finalize()
        return done

    def abort(self) -> None:
        """Drop the file being written and the one waiting (their rows were never acknowledged)."""
        for file in (self.current, self._waiting):
            if file is not None:
                file.abort()
        self.current = self._waiting = None
