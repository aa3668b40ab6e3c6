"""``wirepipe.storage``: the one file-discovery rule, the one atomic file, the one Parquet file life, the one
table buffer."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wirepipe.core.errors import WirepipeError
from wirepipe.storage.files import (
    TEMP_SUFFIX,
    AtomicFile,
    TableBuffer,
    find_files,
    is_hidden,
    sub_folders,
    temp_path,
    write_atomic,
)
from wirepipe.storage.lifecycle import ParquetFileWriter, RollingParquetFiles, write_parquet
from wirepipe.storage.parts import PartWriter

HIDDEN = (".hidden.parquet", "_metadata.parquet", "_SUCCESS", "late.parquet.inprogress", ".dot/d.parquet",
          "_temporary/0/e.parquet", "sub/.x.parquet.inprogress", "sub/_common_metadata")


def tree(root: Path) -> None:
    for name in ("b.parquet", "a.parquet", "notes.txt", "sub/c.parquet", *HIDDEN):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")


def test_a_folder_names_its_visible_files_in_name_order(tmp_path: Path) -> None:
    tree(tmp_path)
    assert [p.name for p in find_files(tmp_path)] == ["a.parquet", "b.parquet", "notes.txt"]
    deep = find_files(str(tmp_path), recursive=True, suffix=".parquet")
    assert [p.relative_to(tmp_path).as_posix() for p in deep] == ["a.parquet", "b.parquet", "sub/c.parquet"]
    assert [d.relative_to(tmp_path).as_posix() for d in sub_folders(tmp_path)] == ["sub"]
    assert [is_hidden(n) for n in ("_SUCCESS", ".x", "a.parquet.inprogress", "a_b.parquet")] == [True, True, True, False]


def test_one_rule_for_every_reader_of_folders(tmp_path: Path) -> None:
    """The file sources, the metrics part folders and ``wirepipe report`` skip the same names."""
    from wirepipe.storage.parts import list_parts
    from wirepipe.study.report.results import _discover

    tree(tmp_path)
    visible = ["a.parquet", "b.parquet"]
    assert [p.name for p in find_files(tmp_path, suffix=".parquet")] == visible
    assert [p.name for p in list_parts(tmp_path)] == visible
    assert [p.relative_to(tmp_path).as_posix() for p in _discover(tmp_path)] == [*visible, "sub/c.parquet"]
    assert [p.name for p in find_files(str(tmp_path / "*"))] == [*visible, "notes.txt"]
    # named by its own path (or by a glob's literal folders), a hidden file is read; a temporary one refused
    assert find_files(tmp_path / "_metadata.parquet") == [tmp_path / "_metadata.parquet"]
    assert [p.name for p in find_files(str(tmp_path / "_temporary" / "*" / "*.parquet"))] == ["e.parquet"]
    with pytest.raises(WirepipeError, match="still being written"):
        find_files(tmp_path / "late.parquet.inprogress")


def test_globs_paths_and_lists_keep_their_order(tmp_path: Path) -> None:
    tree(tmp_path)
    got = find_files([str(tmp_path / "sub" / "c.parquet"), str(tmp_path / "*.parquet")])
    assert [p.name for p in got] == ["c.parquet", "a.parquet", "b.parquet"]
    assert [p.name for p in find_files(str(tmp_path / "**" / "*.parquet"), recursive=True)] == [
        "a.parquet", "b.parquet", "c.parquet"]


def test_what_cannot_be_read_is_named(tmp_path: Path) -> None:
    tree(tmp_path)
    with pytest.raises(WirepipeError, match=r"missing\.jsonl: no such file or folder"):
        find_files(tmp_path / "missing.jsonl")
    with pytest.raises(WirepipeError, match="no file matches this pattern"):
        find_files(str(tmp_path / "*.avro"))
    with pytest.raises(WirepipeError, match="still being written"):
        find_files(tmp_path / "sub" / ".x.parquet.inprogress")
    (tmp_path / "empty").mkdir()
    assert find_files(tmp_path / "empty") == []
    with pytest.raises(WirepipeError, match="empty: nothing here"):
        find_files(tmp_path / "empty", on_empty=lambda folder: f"{folder.name}: nothing here")


def test_an_atomic_file_is_invisible_until_committed_and_commit_resumes(tmp_path: Path) -> None:
    final = tmp_path / "out" / "part-1.parquet"
    atomic = AtomicFile(final, owner=42)
    assert atomic.temp == tmp_path / "out" / ".part-1.parquet.42.inprogress" == temp_path(final, 42)
    table = pa.table({"x": list(range(100))})
    with pq.ParquetWriter(atomic.file, table.schema) as writer:
        writer.write_table(table)
    assert not final.exists() and atomic.temp.exists()
    assert atomic.commit() == final and not atomic.temp.exists()
    assert atomic.commit() == final  # a retry after the rename went through: nothing to redo
    assert pq.read_table(final).column("x").to_pylist() == list(range(100))
    assert not AtomicFile.free(final)


def test_an_aborted_or_failed_write_leaves_nothing(tmp_path: Path) -> None:
    atomic = AtomicFile(tmp_path / "a.bin")
    atomic.file.write(b"half")
    atomic.abort()
    assert list(tmp_path.iterdir()) == []

    def fail(file: object) -> None:
        raise ValueError("encoder broke")

    with pytest.raises(ValueError):
        write_atomic(tmp_path / "b.bin", fail)
    assert list(tmp_path.iterdir()) == []
    assert write_atomic(tmp_path / "c.bin", lambda f: f.write(b"whole")).read_bytes() == b"whole"


def test_the_table_buffer_hands_out_runs_of_one_schema_and_keeps_what_was_not_written() -> None:
    buffer = TableBuffer()
    a, b = pa.table({"x": [1, 2]}), pa.table({"x": [3]})
    c = pa.table({"x": [4], "y": ["new"]})
    for t in (a, b, c):
        buffer.append(t)
    assert buffer.rows == 4 and buffer.nbytes == a.nbytes + b.nbytes + c.nbytes
    n, run = buffer.leading_run()
    assert n == 2 and run.column("x").to_pylist() == [1, 2, 3]
    assert buffer.rows == 4  # nothing leaves before consume
    buffer.consume(n, rest=run.slice(2))
    assert buffer.rows == 2 and [t.num_rows for t in buffer.tables] == [1, 1]
    n, run = buffer.leading_run()
    assert n == 1 and run.column("x").to_pylist() == [3]
    buffer.consume(1)
    n, run = buffer.leading_run()
    assert run.column_names == ["x", "y"]
    buffer.clear()
    assert not buffer and buffer.rows == buffer.nbytes == 0


# --- the Parquet file life ---------------------------------------------------------------------------


def test_a_parquet_file_is_hidden_under_its_writers_pid_until_finalized(tmp_path: Path) -> None:
    table = pa.table({"x": list(range(10))})
    file = ParquetFileWriter(tmp_path / "a.parquet", table.schema, fsync=False)
    assert file.temp == temp_path(tmp_path / "a.parquet", os.getpid())
    file.write(table, row_group_size=4)
    file.close()
    assert [p.name for p in tmp_path.iterdir()] == [file.temp.name] and file.nbytes > 0
    assert file.finalize() == tmp_path / "a.parquet" == file.finalize()  # finalize again: nothing to redo
    assert pq.ParquetFile(tmp_path / "a.parquet").metadata.num_row_groups == 3
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]

    dropped = ParquetFileWriter(tmp_path / "b.parquet", table.schema)
    dropped.write(table)
    dropped.abort()

    def fail(file: ParquetFileWriter) -> None:
        file.write(table)
        raise ValueError("encoder broke")

    with pytest.raises(ValueError):
        write_parquet(tmp_path / "c.parquet", table.schema, fail)
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]


class ObjectStore:
    """A filesystem as an object store has it (``storage.files.FileSystem``): ``mem://`` paths, objects that exist
    once their channel is closed, and a rename that refuses to replace an object (as HDFS's does)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def split(self, path: str) -> tuple[str, str]:
        folder, _, name = path.rpartition("/")
        return folder, name

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *paths])

    def create(self, path: str) -> Any:
        store = self

        class Channel(io.BytesIO):
            def close(self) -> None:
                if not self.closed:
                    store.objects[path] = self.getvalue()
                super().close()

        return Channel()

    def exists(self, path: str) -> bool:
        return path in self.objects

    def delete(self, paths: list[str]) -> None:
        for path in paths:
            del self.objects[path]

    def rename(self, source_file_names: list[str], destination_file_names: list[str]) -> None:
        for source, destination in zip(source_file_names, destination_file_names, strict=True):
            if destination in self.objects:
                raise OSError(f"{destination} exists")
            self.objects[destination] = self.objects.pop(source)


def test_a_parquet_file_lives_the_same_life_through_another_filesystem() -> None:
    """Through a filesystem of objects (a Beam worker's ``gs://`` parts): hidden under its owner's temporary name
    until finalized, a retried write replaces the earlier file of its name, a failed one leaves nothing."""
    from wirepipe.storage.lifecycle import write_table

    store = ObjectStore()
    table = pa.table({"x": list(range(10))})
    file = ParquetFileWriter("mem://b/out/part-1.parquet", table.schema, filesystem=store, owner="w1")
    file.write(table, row_group_size=4)
    file.close()
    assert file.temp == "mem://b/out/.part-1.parquet.w1.inprogress" and list(store.objects) == []
    assert file.finalize() == "mem://b/out/part-1.parquet" == file.finalize()  # again: nothing to redo
    assert pq.ParquetFile(io.BytesIO(store.objects["mem://b/out/part-1.parquet"])).metadata.num_row_groups == 3
    assert write_table("mem://b/out/part-1.parquet", table.slice(0, 2), filesystem=store, owner="w2") \
        == "mem://b/out/part-1.parquet"  # a retried bundle's part: the same name, replaced
    assert list(store.objects) == ["mem://b/out/part-1.parquet"]
    assert pq.read_table(io.BytesIO(store.objects["mem://b/out/part-1.parquet"])).num_rows == 2

    def fail(file: ParquetFileWriter) -> None:
        file.write(table)
        raise ValueError("encoder broke")

    with pytest.raises(ValueError):
        write_parquet("mem://b/out/part-2.parquet", table.schema, fail, filesystem=store, owner="w1")
    assert list(store.objects) == ["mem://b/out/part-1.parquet"]


@pytest.mark.slow
def test_a_beam_workers_part_is_written_through_beams_filesystems(tmp_path: Path) -> None:
    """``replay/beam_fn.write_part`` on a local folder through Beam's own ``FileSystems``: one whole part, no
    temporary left, and a retried bundle's part replaces the earlier one."""
    from wirepipe.replay.beam_fn import write_part

    folder = str(tmp_path / "results")
    part = write_part(folder, 7, [pa.table({"x": [1, 2]}), pa.table({"x": [3]})])
    assert part == str(tmp_path / "results" / "part-000000000007.parquet")
    assert pq.read_table(part).column("x").to_pylist() == [1, 2, 3]
    write_part(folder, 7, [pa.table({"x": [9]})])
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["part-000000000007.parquet"]
    assert pq.read_table(part).column("x").to_pylist() == [9]


def test_rolling_files_finish_in_order_and_each_waits_for_the_one_before(tmp_path: Path) -> None:
    schema = pa.schema([("x", pa.int64())])
    files = RollingParquetFiles(tmp_path / "out", leftovers=f".f-*{TEMP_SUFFIX}", what="test", fsync=False)
    assert files.start() == [] and (tmp_path / "out").is_dir()
    assert files.finish() is None  # nothing open
    for n in range(3):
        files.open(tmp_path / "out" / f"f-{n}.parquet", schema).write(pa.table({"x": [n]}))
        # the next open finishes this one first
    assert [p.name for p in files.files] == ["f-0.parquet", "f-1.parquet"] and files.current is not None
    assert files.finish() == tmp_path / "out" / "f-2.parquet"
    assert [pq.read_table(p).column("x").to_pylist() for p in files.files] == [[0], [1], [2]]
    files.open(tmp_path / "out" / "f-3.parquet", schema).write(pa.table({"x": [3]}))
    files.abort()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["f-0.parquet", "f-1.parquet", "f-2.parquet"]


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The pid of another running process (a pool's other worker), and it stays running for the test."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_leftovers_of_dead_writers_are_named_or_deleted_and_a_live_writers_are_left_alone(
        tmp_path: Path, live_pid: int, caplog: pytest.LogCaptureFixture) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)
    for name in ("f-1.parquet", "part-r-000001-000001.parquet"):
        temp_path(tmp_path / name, dead_pid).write_bytes(b"half a file")
        temp_path(tmp_path / name, live_pid).write_bytes(b"being written")
    files = RollingParquetFiles(tmp_path, leftovers=f".f-*{TEMP_SUFFIX}", what="test")
    with caplog.at_level(logging.WARNING, logger="wirepipe"):
        assert files.start() == [temp_path(tmp_path / "f-1.parquet", dead_pid)]
    assert "1 unfinished test file(s), 11 bytes" in caplog.text
    PartWriter(tmp_path, "next", pa.schema([("x", pa.int64())])).close()  # metrics parts delete theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([
        temp_path(tmp_path / "f-1.parquet", dead_pid).name, temp_path(tmp_path / "f-1.parquet", live_pid).name,
        temp_path(tmp_path / "part-r-000001-000001.parquet", live_pid).name])


def test_every_parquet_writer_hides_its_file_under_its_pid_until_it_is_complete(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from wirepipe.connectors.capture_format import capture_table
    from wirepipe.connectors.capture_sink import CaptureWriter
    from wirepipe.connectors.parquet import ParquetSink
    from wirepipe.core.batch import Batch

    def visible(folder: Path) -> list[str]:
        return sorted(p.name for p in folder.iterdir())

    async def sink(path: Path) -> tuple[list[str], list[Path]]:
        out = ParquetSink(path)
        await out.open()  # names what a dead writer left
        await out.write(Batch([{"x": 1}, {"x": 2}]))
        await out.flush()  # one file: its rows into its temporary; part files: a complete part
        during = visible(path.parent)
        await out.close()
        return during, out.files

    for name in ("out.parquet", "part-{part}.parquet"):
        folder = tmp_path / name.split(".")[0].split("-")[0]
        folder.mkdir()
        left = temp_path(folder / name.replace("{part}", "old"), owner=999_999_999)
        left.write_bytes(b"half a file")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="wirepipe"):
            during, files = asyncio.run(sink(folder / name))
        assert "1 unfinished parquet file(s), 11 bytes" in caplog.text
        [final] = files
        assert pq.read_table(final).column("x").to_pylist() == [1, 2]
        assert visible(folder) == sorted([left.name, final.name])
        written = final.name if "{part}" in name else temp_path(final, os.getpid()).name
        assert during == sorted([left.name, written])

    writer = CaptureWriter(tmp_path / "cap", row_group_rows=2, fsync=False)
    writer.append(capture_table(Batch([b"a", b"b", b"c"], subjects="s"), 0, writer.schema()))
    assert [p.name.endswith(f".{os.getpid()}{TEMP_SUFFIX}") for p in (tmp_path / "cap").iterdir()] == [True]
    path = writer.finish_file()
    assert path is not None and visible(tmp_path / "cap") == [path.name]


@pytest.mark.parametrize("name", ["out", "out-{part}", "o[1].parquet", "o[1]-{part}.parquet"])
def test_a_parquet_sink_of_any_file_name_opens_and_names_its_own_leftovers(
        tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture) -> None:
    """A name without a suffix (``path: out``) made the leftovers' glob ``.out**.inprogress``, which pathlib
    refuses: `validate` said ok and `run` ended in a traceback; a ``[`` was read as a glob class."""
    import asyncio

    from wirepipe.connectors.parquet import ParquetSink
    from wirepipe.core.batch import Batch

    left = temp_path(tmp_path / name.replace("{part}", "old"), owner=999_999_999)
    left.write_bytes(b"half a file")
    temp_path(tmp_path / "other.parquet", owner=999_999_999).write_bytes(b"another sink's")

    async def write() -> list[Path]:
        out = ParquetSink(tmp_path / name)
        await out.open()
        await out.write(Batch([{"x": 1}, {"x": 2}]))
        await out.close()
        return out.files

    with caplog.at_level(logging.WARNING, logger="wirepipe"):
        [final] = asyncio.run(write())
    assert "1 unfinished parquet file(s), 11 bytes" in caplog.text
    assert pq.read_table(final).column("x").to_pylist() == [1, 2]
