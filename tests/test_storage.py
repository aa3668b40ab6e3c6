"""``wirepipe.storage.files``: the one file-discovery rule, the one atomic file, the one table buffer."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wirepipe.core.errors import WirepipeError
from wirepipe.storage.files import (
    AtomicFile,
    TableBuffer,
    find_files,
    is_hidden,
    sub_folders,
    temp_path,
    write_atomic,
)

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
    from wirepipe.report.results import _discover
    from wirepipe.storage.parts import list_parts

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
