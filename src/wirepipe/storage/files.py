"""Files on disk, one rule each: which files a path names, how a file is written atomically.

**Finding files** (``find_files``): a path names itself; a folder names its files (with
``recursive``, those of its sub-folders too), in the order of their names; a glob (``*``,
``?``, ``[``) names the files it matches, sorted. ``suffix`` keeps the files of a folder
that end with it. A listing (a folder's, a glob's past its literal part) never returns a
hidden name (``is_hidden``): one that starts with ``.`` or ``_``, as pyarrow datasets,
Spark and Hadoop skip them (``_SUCCESS``, ``_metadata``, ``_temporary/``), nor anything
under a hidden folder, nor a temporary still being written (``TEMP_SUFFIX``); a hidden
file named by its own path is read, a temporary one refused. Every reader of files finds
them so: the JSON Lines and Parquet sources (``input_files``), captures, replays, the metrics
part folders (``parts.list_parts``) and ``wirepipe report``'s folder walk (``sub_folders``). A
file written next to an output (the default dead-letter file) is named by ``beside_file``.

**Writing a file atomically** (``AtomicFile``): readers must never see half a file (a
Parquet file is readable only once its footer is written). So a file is written under a
hidden temporary name beside its final one, ``.NAME.inprogress`` (``.NAME.OWNER.inprogress``
when several processes write into one folder and a dead one's leftovers must be told
from a live one's), through a ``SpoolingFile`` (a full disk loses nothing), then fsynced
when asked and renamed into place. ``commit`` resumes after an error: called again, it
goes on where it stopped and never renames twice. Every local writer goes through it: whole
files written at once (reports, dictionaries, test snapshots) and every Parquet file (the ``parquet``
sink's, captures, metrics parts, ``wirepipe bench``'s results), which lives the one life of
``storage/lifecycle.py`` (open, write, close, finalize) on top of it.

**Through another filesystem** (``FileSystem``, ``FileSystemFile``): a Beam worker writes its results parts
through Beam's ``FileSystems`` (``gs://``, ``s3://``, ``hdfs://`` as well as local folders), which has no
``os.replace``, no fsync and no local disk to spool to; on object stores a rename is a copy and a delete, and
not every filesystem lets a rename replace a file (HDFS refuses). Such a file takes the same temporary name
(a Beam worker's owned by a random id: bundles of one worker write concurrently) and commits that filesystem's
way: a retried
bundle's earlier file (same records, same name) is deleted, then the temporary renamed. ``atomic_file`` picks
the kind; the Parquet life (``storage/lifecycle.py``) takes either.

**Unfinished files** (``unfinished_files``, ``report_unfinished``, ``delete_unfinished``): a writer
killed (SIGKILL) or stopped on an error (a full disk at shutdown) leaves its temporary file. Nothing
reads it (listings skip it) and nothing in it was acknowledged, but it takes room: the next writer
into the folder names it in a warning (capture files, the ``parquet`` sink's files) or deletes it
(metrics parts, ``storage/parts.py``). A temporary named with its writer's process id is left alone
while that process runs (a pool's other workers write into the same folder).

**Buffering tables into row groups** (``TableBuffer``): a Parquet writer makes good files
from big row groups, and a pipeline hands it small batches. Sinks append each batch's
table to a buffer and write from it once a row group is full; rows leave the buffer
only once written, so a file that cannot be written now keeps them.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import MissingInput, WirepipeError
from .spool import SpoolingFile

TEMP_SUFFIX = ".inprogress"
_OWNER = re.compile(r"\.(?P<pid>\d+)" + re.escape(TEMP_SUFFIX) + "$")
log = logging.getLogger("wirepipe")


# --- finding files --------------------------------------------------------------------------------

PathArg = str | os.PathLike[str]
Paths = PathArg | Sequence[PathArg]  # a file, a glob, a folder, or a list of them


def fspaths(paths: Paths) -> str | list[str]:
    """Paths as a config spells them: a ``str`` (a ``pathlib.Path`` is accepted), or a list of them."""
    if isinstance(paths, (str, os.PathLike)):
        return os.fspath(paths)
    return [os.fspath(p) for p in paths]


def is_pattern(item: str | Path) -> bool:
    """A glob, not a plain path."""
    return any(ch in str(item) for ch in "*?[")


HIDDEN_PREFIXES = (".", "_")


def is_hidden(name: str) -> bool:
    """A file or folder name no listing returns: hidden (``.`` or ``_`` first) or a temporary being written."""
    return name.startswith(HIDDEN_PREFIXES) or name.endswith(TEMP_SUFFIX)


def folder_files(folder: Path, *, recursive: bool = False, suffix: str | None = None) -> list[Path]:
    """The files of a folder, hidden ones (and those under hidden folders) skipped, in the order of their names."""
    found = folder.rglob("*") if recursive else folder.iterdir()
    out = [f for f in found if f.is_file() and (suffix is None or f.name.endswith(suffix))
           and not any(is_hidden(part) for part in f.relative_to(folder).parts)]
    return sorted(out, key=lambda f: f.relative_to(folder).parts)


def sub_folders(folder: Path) -> list[Path]:
    """Every folder under ``folder``, hidden ones and what is under them skipped, in the order of their names."""
    out = [d for d in folder.rglob("*") if d.is_dir()
           and not any(is_hidden(part) for part in d.relative_to(folder).parts)]
    return sorted(out, key=lambda d: d.relative_to(folder).parts)


def pattern_files(pattern: str | Path, *, recursive: bool = False) -> list[Path]:
    """The files a glob matches, sorted; hidden names past the pattern's literal folders skipped."""
    parts = Path(pattern).parts
    literal = next((i for i, part in enumerate(parts) if is_pattern(part)), len(parts))
    return [m for m in sorted(Path(m) for m in glob.glob(str(pattern), recursive=recursive))
            if m.is_file() and not any(is_hidden(part) for part in m.parts[literal:])]


def find_files(paths: str | Path | Iterable[str | Path], *, recursive: bool = False,
               suffix: str | None = None, on_empty: Callable[[Path], str] | None = None,
               what: str = "file") -> list[Path]:
    """The files named by paths, folders and globs (or a list of those), in that order.

    A name that does not exist, a glob that matches nothing and, when ``on_empty`` gives
    its message, a folder without files raise ``MissingInput`` (a usage error); a temporary file still
    being written (``TEMP_SUFFIX``) is refused by name.
    """
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = folder_files(p, recursive=recursive, suffix=suffix)
            if not found and on_empty is not None:
                raise MissingInput(on_empty(p))
            out += found
        elif is_pattern(item):
            matches = pattern_files(item, recursive=recursive)
            if not matches:
                raise MissingInput(f"{item}: no file matches this pattern")
            out += matches
        elif p.name.endswith(TEMP_SUFFIX):
            raise WirepipeError(f"{p}: this {what} is still being written (or its writer died); "
                                "read the completed files")
        elif not p.exists():
            raise MissingInput(f"{p}: no such file or folder")
        else:
            out.append(p)
    return out


def input_files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    """The files a file source reads (``find_files``); a folder without files is an error too."""
    return find_files(paths, on_empty=lambda folder: f"{folder}: no files in this folder")


def beside_file(path: str, suffix: str) -> str:
    """``path``'s name with its suffix (and a ``{part}`` placeholder) replaced by ``suffix``:
    ``out/records.jsonl`` -> ``out/records.dead.jsonl``, ``out/part-w0-{part}.parquet`` -> ``out/part-w0.dead.jsonl``."""
    p = Path(path)
    stem = (p.stem if p.suffix else p.name).replace("{part}", "").strip("-_.") or "records"
    return str(p.with_name(stem + suffix))


# --- writing a file atomically ----------------------------------------------------------------------


def temp_path(final: Path, owner: str | int | None = None) -> Path:
    """The hidden name a file is written under until it is complete: ``.NAME[.OWNER].inprogress``."""
    return final.with_name(f".{final.name}{'' if owner is None else f'.{owner}'}{TEMP_SUFFIX}")


def temp_glob(names: str) -> str:
    """The glob of the temporary names (``temp_path``, any owner) of the files ``names`` (a glob) matches:
    ``.NAMES*.inprogress``, one ``*`` where two would meet (pathlib refuses ``**`` inside a name).

    >>> temp_glob("out*"), temp_glob("part-*.parquet")
    ('.out*.inprogress', '.part-*.parquet*.inprogress')
    """
    return re.sub(r"\*{2,}", "*", f".{names}*{TEMP_SUFFIX}")


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicFile:
    """A file written under its temporary name and renamed into place by ``commit``.

    ``file`` is the ``SpoolingFile`` to write (a ``ParquetWriter`` writes through it).
    ``commit`` gets every byte to disk (fsynced when ``fsync``), renames the file into
    place (the folder fsynced too) and returns the final path; after an ``OSError`` (a
    full disk) call it again: it resumes, and a rename that went through is not redone.
    """

    def __init__(self, final: str | Path, *, owner: str | int | None = None) -> None:
        self.final = Path(final)
        self.temp = temp_path(self.final, owner)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.file = SpoolingFile(self.temp)

    @classmethod
    def free(cls, final: Path) -> bool:
        """Neither ``final`` nor a temporary name of it (whatever its owner) exists (a writer choosing a new name)."""
        return not final.exists() and not any(final.parent.glob(f".{glob.escape(final.name)}*{TEMP_SUFFIX}"))

    def drain(self) -> None:
        """Get what was written so far into the temporary file (raises while the disk is full; resumes)."""
        self.file.drain()

    def commit(self, *, fsync: bool = True) -> Path:
        file = self.file
        if not file.closed:
            file.fsync() if fsync else file.drain()
            file.close()
        if self.temp.exists() or not self.final.exists():  # a retry after the rename went through: not again
            os.replace(self.temp, self.final)
        if fsync:
            fsync_folder(self.final.parent)
        return self.final

    def abort(self) -> None:
        """Drop the file: its bytes were never meant to be seen."""
        self.file.abandon()
        with contextlib.suppress(FileNotFoundError):
            self.temp.unlink()


class FileSystem(Protocol):
    """What a file written through another filesystem needs of it: Apache Beam's ``FileSystems`` (its class, whose
    methods are static) is one, and reaches ``gs://``, ``s3://``, ``hdfs://`` and local paths alike."""

    def split(self, path: str) -> tuple[str, str]: ...
    def join(self, basepath: str, *paths: str) -> str: ...
    def create(self, path: str) -> Any: ...
    def exists(self, path: str) -> bool: ...
    def delete(self, paths: list[str]) -> None: ...
    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None: ...


class FileSystemFile:
    """A file written through ``filesystem`` under its temporary name and renamed into place by ``commit`` (see
    the module doc): ``file`` is the filesystem's write channel. ``commit`` resumes as ``AtomicFile``'s does."""

    def __init__(self, final: str, filesystem: FileSystem, *, owner: str | int | None = None) -> None:
        self.final = final
        self.filesystem = filesystem
        folder, name = filesystem.split(final)
        self.temp = filesystem.join(folder, temp_path(Path(name), owner).name)
        self.file = filesystem.create(self.temp)  # a local folder is made by Beam's LocalFileSystem

    def drain(self) -> None:
        self.file.flush()

    def commit(self, *, fsync: bool = True) -> str:
        """Close, then rename into place (``fsync`` is the filesystem's own business)."""
        fs = self.filesystem
        if not self.file.closed:
            self.file.close()
        if fs.exists(self.temp):  # not yet renamed (a retry after the rename went through: not again)
            if fs.exists(self.final):  # a retried bundle's earlier file: the same records under the same name
                fs.delete([self.final])
            fs.rename([self.temp], [self.final])
        return self.final

    def abort(self) -> None:
        with contextlib.suppress(Exception):  # its bytes are dropped anyway
            self.file.close()
        with contextlib.suppress(Exception):
            if self.filesystem.exists(self.temp):
                self.filesystem.delete([self.temp])


def atomic_file(final: str | Path, *, owner: str | int | None = None,
                filesystem: FileSystem | None = None) -> AtomicFile | FileSystemFile:
    """The file ``final`` written under its temporary name: on the local disk (``AtomicFile``), or through
    ``filesystem`` (``FileSystemFile``)."""
    if filesystem is None:
        return AtomicFile(final, owner=owner)
    return FileSystemFile(str(final), filesystem, owner=owner)


def write_atomic(final: str | Path, fill: Callable[[Any], None], *, owner: str | int | None = None,
                 fsync: bool = False) -> Path:
    """Write a whole file at once: ``fill(file)`` writes it, then it is committed (removed on any error)."""
    atomic = AtomicFile(final, owner=owner)
    try:
        fill(atomic.file)
        return atomic.commit(fsync=fsync)
    except BaseException:
        atomic.abort()
        raise


def write_bytes_atomic(final: str | Path, data: bytes) -> Path:
    """``data`` as the whole of ``final``, written under its temporary name and renamed (``write_atomic``)."""
    return write_atomic(final, lambda file: file.write(data))



def create_atomic(final: str | Path, data: bytes) -> bool:
    """``data`` as a new file ``final``, whole or not at all, unless ``final`` exists: False then, and the file is
    left as it was. Two processes racing for one name: exactly one gets True (a hard link never replaces a file)."""
    final = Path(final)
    temp = temp_path(final, os.getpid())
    final.parent.mkdir(parents=True, exist_ok=True)
    temp.write_bytes(data)
    try:
        os.link(temp, final)
    except FileExistsError:
        return False
    finally:
        temp.unlink()
    return True


# --- unfinished files ------------------------------------------------------------------------------


def owner_alive(pid: int) -> bool:
    """A process with this id runs (this one included)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def unfinished_files(folder: Path, pattern: str) -> list[Path]:
    """The temporary files in ``folder`` that ``pattern`` (a glob of ``.NAME[.OWNER].inprogress`` names) matches
    and that no running process writes: named with a dead process's id, or with none. In name order."""
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob(pattern)):
        if not path.name.endswith(TEMP_SUFFIX) or not path.is_file():
            continue
        owner = _OWNER.search(path.name)
        if owner is None or not owner_alive(int(owner["pid"])):
            out.append(path)
    return out


def delete_unfinished(folder: Path, pattern: str) -> list[Path]:
    """Delete the ``unfinished_files`` a writer finds where it starts (none of their rows is wanted); returns them."""
    left = unfinished_files(folder, pattern)
    for path in left:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return left


def report_unfinished(folder: Path, pattern: str, what: str) -> list[Path]:
    """Name the ``unfinished_files`` a writer finds where it starts, in one warning; returns them."""
    left = unfinished_files(folder, pattern)
    if left:
        size = sum(_size(p) for p in left)
        log.warning("%s has %d unfinished %s file(s), %s bytes, from a run that did not stop cleanly (killed, or "
                    "stopped while its disk was full): never read and never acknowledged, they can be deleted: %s",
                    folder, len(left), what, f"{size:,}", ", ".join(p.name for p in left[:5])
                    + (f" and {len(left) - 5} more" if len(left) > 5 else ""))
    return left


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- buffering tables into row groups ---------------------------------------------------------------


class TableBuffer:
    """Arrow tables waiting to be written as row groups, in order, with their row and byte counts."""

    def __init__(self) -> None:
        self.tables: list[Any] = []
        self.rows = 0
        self.nbytes = 0

    def __bool__(self) -> bool:
        return bool(self.tables)

    def append(self, table: Any) -> None:
        self.tables.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes

    def leading_run(self) -> tuple[int, Any]:
        """The leading tables that share the first one's schema: (how many, concatenated).

        They stay buffered until ``consume``: a write that fails leaves them in place.
        """
        import pyarrow as pa

        tables = self.tables
        schema = tables[0].schema
        n = 1
        while n < len(tables) and tables[n].schema == schema:
            n += 1
        return n, tables[0] if n == 1 else pa.concat_tables(tables[:n])

    def consume(self, n: int, rest: Any = None) -> None:
        """Drop the ``n`` leading tables (written); ``rest``, rows of them not written, goes back in front."""
        taken, self.tables = self.tables[:n], self.tables[n:]
        self.rows -= sum(t.num_rows for t in taken)
        self.nbytes -= sum(t.nbytes for t in taken)
        if rest is not None and rest.num_rows:
            self.tables.insert(0, rest)
            self.rows += rest.num_rows
            self.nbytes += rest.nbytes

    def clear(self) -> None:
        self.tables, self.rows, self.nbytes = [], 0, 0
