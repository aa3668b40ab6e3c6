"""A file that accepts every write and gets the bytes to disk when it can (a full disk loses nothing).

A writer that meets ``ENOSPC`` in the middle of a buffer has written part of it, and a
``BufferedWriter`` or Parquet writer left in that state cannot say which part: retrying
the write duplicates bytes (a repeated or torn JSON line), giving up drops them, and a
Parquet file is broken either way. ``SpoolingFile`` never fails a ``write``: bytes go to
an in-memory spool and from there to the file with ``os.write``, which reports exactly
how much it wrote. When the disk is full the rest stays spooled; ``drain()`` (the sink's
``flush``) raises the ``OSError`` and, called again once there is room, continues exactly
where it stopped. So every byte reaches the file once and in order, and a Parquet writer
writing through it (``ParquetWriter(spool, schema)``) never sees an error.

Memory: the spool holds what could not be written, at most what the pipeline wrote
between two flushes (it stops writing while a flush fails).
"""

from __future__ import annotations

import os
from pathlib import Path

_CHUNK = 1 << 20


class SpoolingFile:
    """A write-only file (``wb`` or ``ab``) whose writes never fail; ``drain`` raises and resumes."""

    def __init__(self, path: str | Path, *, append: bool = False, spool_bytes: int = 1 << 20) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        self._fd = os.open(self.path, flags, 0o644)  # an unwritable path fails here, at open
        self._spool = bytearray()
        self._position = os.lseek(self._fd, 0, os.SEEK_END) if append else 0
        self._drained_end = self._position  # where the file ended after the last complete drain
        self.spool_bytes = spool_bytes
        self.error: OSError | None = None  # the last failed attempt to write, until one succeeds
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._spool += data
        self._position += len(data)
        if len(self._spool) >= self.spool_bytes and self.error is None:
            self.try_drain()
        return len(data)

    def tell(self) -> int:
        """Bytes written so far, spooled or on disk (what a Parquet writer counts offsets by)."""
        return self._position

    def writable(self) -> bool:
        return True

    @property
    def spooled(self) -> int:
        """Bytes accepted but not yet in the file."""
        return len(self._spool)

    def flush(self) -> None:
        """What file-like callers expect of ``flush``: try, never raise (``drain`` raises)."""
        self.try_drain()

    def try_drain(self) -> bool:
        try:
            self.drain()
        except OSError as exc:
            self.error = exc
            return False
        return True

    def drain(self) -> None:
        """Write the spool to the file; on an ``OSError`` what was not written stays for the next call."""
        spool = self._spool
        done = 0
        view = memoryview(spool)
        try:
            while done < len(spool):
                done += os.write(self._fd, view[done:done + _CHUNK])
        finally:
            view.release()
            del spool[:done]
        self.error = None
        self._drained_end = self._position

    def fsync(self) -> None:
        if self.closed:  # closed after a successful drain and fsync: nothing left to do
            return
        self.drain()
        os.fsync(self._fd)

    def close(self, *, rollback: bool = False) -> None:
        """Drain and close; raises if the spool cannot be written (and stays open, unless ``rollback``:
        then the file is cut back to where it ended after the last complete drain, so a line or
        record torn by the full disk is not left behind, and closed)."""
        if self.closed:
            return
        try:
            self.drain()
        except OSError:
            if not rollback:
                raise
            os.ftruncate(self._fd, self._drained_end)
            self.abandon()
            raise
        os.close(self._fd)
        self.closed = True

    def abandon(self) -> None:
        """Close without writing the spool (the caller gave up on this file)."""
        if not self.closed:
            self._spool.clear()
            os.close(self._fd)
            self.closed = True


def check_writable(folder: str | Path) -> None:
    """Create ``folder`` if needed and a file in it, now: an unwritable output (read-only file
    system, a file where a folder is expected) fails at start, not at the first flush."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".wirepipe-probe-{os.getpid()}"
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    probe.unlink()
