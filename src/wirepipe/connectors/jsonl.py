"""JSON Lines connectors: the ``jsonl`` sink and source.

One JSON value per line. Bytes are written as ``{"$base64": "<base64>"}`` (the same
convention as the ``json`` format) and read back as bytes, so a payload column (bytes
after ``serialize``) or a record with byte fields survives the round trip exactly. With
``envelope: true`` each line is ``{"value", "subject", "headers"}``.

Full disk: the file is written through a ``SpoolingFile``: a write that finds no space
leaves the rest in memory, ``flush`` fails (the pipeline holds the records and retries)
and continues exactly where it stopped once there is room. Nothing is written twice.
The failure is the ``OSError`` itself (``ENOSPC``, or ``EDQUOT``, ``EIO``), not a ``BackOff``:
the OS does not say when room comes back, and the run loop already treats an ``OSError``
from a sink as the sink's condition, retried with its own bounded backoff (50 ms doubling
to 5 s, under a third of a JetStream source's ``ack_wait``). ``BackOff(wait)`` is for a
part that knows how long to wait (a server that says "retry later").

What ``flush()`` makes durable (the pipeline acknowledges a JetStream source only after
it): the file is flushed to the OS, which survives a kill of the process. A line a killed
writer tore is cut off before appending; a full disk at the end leaves no torn line.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any, ClassVar, Literal

from pydantic import Field

from ..codecs.formats import B64_MARK, json_default, restore_bytes
from ..core.batch import Batch
from ..core.errors import CannotShare
from ..core.limits import size_text
from ..core.models import SourceLimits, Strict
from ..core.stages import Stage
from ..core.workers import Worker
from ..storage.files import Paths, beside_file, fspaths, input_files
from ..storage.spool import SpoolingFile
from .connector import Configured, Sink, WritesFiles
from .files import FileSource

log = logging.getLogger("wirepipe")


class JsonlSink(Configured, Sink, WritesFiles):
    """One JSON value per line; bytes as ``{"$base64": ...}``. ``path: "-"`` writes to stdout."""

    type = "jsonl"
    stage = Stage.WRITE
    batch_results = "files"  # Beam replay writes Parquet result files instead
    config: JsonlSinkConfig

    def __init__(self, path: str | os.PathLike[str], **fields: Any) -> None:
        """``fields`` are ``JsonlSinkConfig``'s (``envelope``, ``append``)."""
        self._init(JsonlSinkConfig, path=os.fspath(path), **fields)

    def _configure(self, config: JsonlSinkConfig) -> None:
        self.config = config
        self._file: IO[bytes] | SpoolingFile | None = None
        self.records = 0

    @property
    def params(self) -> dict[str, Any]:
        return {"path": self.config.path, "envelope": self.config.envelope}

    def for_worker(self, index: int, count: int) -> JsonlSink:
        """Each worker writes a file of its own (``out.jsonl`` -> ``out.w1.jsonl``); standard output is one."""
        path = self.config.path
        if path != "-":
            return self.reconfigured(path=Worker(index, count).path(path))
        if count > 1:
            raise CannotShare("path", f"'-' (stdout) cannot be shared by several workers ({count}): give a file "
                                      "(each worker writes its own copy, out.jsonl -> out.w0.jsonl, out.w1.jsonl, "
                                      "...), or use one worker")
        return self

    @property
    def files(self) -> list[Path]:
        path = self.config.path
        return [] if path == "-" else [Path(path)]

    def beside(self, suffix: str) -> str | None:
        path = self.config.path
        return None if path == "-" else beside_file(path, suffix)

    async def open(self) -> None:
        path, append = self.config.path, self.config.append
        if path == "-":
            self._file = sys.stdout.buffer
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if append:
            _cut_torn_line(Path(path))
        self._file = SpoolingFile(path, append=append)

    async def write(self, batch: Batch) -> None:
        import orjson

        assert self._file is not None, "write() before open()"
        dumps = orjson.dumps
        opt = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
        if self.config.envelope:
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
    path: str = Field(description="the file to write; - for stdout")
    envelope: bool = Field(default=False, description="write {value, subject, headers} per line instead of the "
                           "value alone")
    append: bool = Field(default=False, description="append to the file (a torn last line is cut first) "
                         "instead of replacing it")

    def build(self) -> JsonlSink:
        return JsonlSink.from_config(self)


MAX_LINE = 64 * 1024 * 1024  # bytes of one line read at most: a file without newlines (/dev/zero) is not read whole


def bounded_lines(f: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) of a file's non-blank lines, each read up to ``MAX_LINE``: a longer one comes as None
    and ends the file (a file without newlines, /dev/zero, is never read whole)."""
    read = f.readline
    for lineno, line in enumerate(iter(lambda: read(MAX_LINE + 1), b""), 1):
        if len(line) > MAX_LINE:
            yield lineno, None
            return
        if line.strip():
            yield lineno, line


class JsonlSource(FileSource):
    """Reads JSON Lines written by ``JsonlSink`` (or any JSONL), restoring ``$base64`` bytes."""

    type = "jsonl"
    config: JsonlSourceConfig

    def __init__(self, path: Paths, **fields: Any) -> None:
        """``fields`` are ``JsonlSourceConfig``'s (``batch_size``, ``count``, ``duration``, ``envelope``)."""
        self._init(JsonlSourceConfig, path=fspaths(path), **fields)

    async def batches(self) -> AsyncIterator[Batch]:
        limit = self.count
        batch_size = self.config.batch_size
        lines: list[tuple[Path, int, bytes | None]] = []
        seq = 0
        for path in input_files(self.config.path):
            with open(path, "rb") as f:
                for lineno, line in bounded_lines(f):
                    lines.append((path, lineno, line))
                    if len(lines) >= batch_size or (limit is not None and seq + len(lines) >= limit):
                        yield self._batch(lines, seq)
                        seq += len(lines)
                        lines = []
                        if (limit is not None and seq >= limit) or self.stopping.is_set():
                            return
        if lines:
            yield self._batch(lines, seq)

    def _batch(self, lines: list[tuple[Path, int, bytes | None]], seq: int) -> Batch:
        """Parse lines; a line that is not JSON is dead-lettered, not fatal (one past ``MAX_LINE``, None, too)."""
        import orjson

        loads = orjson.loads
        values: list[Any] = []
        bad: list[tuple[int, str]] = []
        for i, (path, lineno, line) in enumerate(lines):
            if line is None:
                values.append(b"")
                bad.append((i, f"{path}:{lineno}: a line longer than {size_text(MAX_LINE)}, the most a JSON line may be "
                               "(NATS carries at most 64 MB a message): it and the rest of the file are not read"))
                continue
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
        if self.config.envelope:
            rows = batch.values
            batch.subjects = [r.get("subject") for r in rows]
            batch.headers = [r.get("headers") for r in rows]
            batch.values = [r.get("value") for r in rows]
        return batch


class JsonlSourceConfig(SourceLimits):
    """``source: {type: jsonl, path: in.jsonl}`` (a file, a glob, a folder or a list)"""

    suffixes: ClassVar[tuple[str, ...]] = (".jsonl", ".ndjson")  # the files it reads, by name (connectors/files.py)

    type: Literal["jsonl"]
    path: str | list[str] = Field(description="a file, a glob, a folder (its files in name order) "
                                   "or a list of them")
    batch_size: int = Field(default=1000, ge=1, description="records per batch: the unit operators, metrics and commits work on")
    envelope: bool = Field(default=False, description="each line is {value, subject, headers}, as the jsonl "
                           "sink's envelope writes it")

    def build(self) -> JsonlSource:
        return JsonlSource.from_config(self)


SOURCES = {"jsonl": JsonlSourceConfig}
SINKS = {"jsonl": JsonlSinkConfig}
RANK = 2  # where its types come in the "allowed" lists (connectors/__init__.py)
