"""Schema drift: the Parquet sink never drops a field; the schema evolves by files, conflicts are dead-lettered.

Before the fix, columns came from the first record of a batch: ``[{a:1},{a:2,b:'x'}]`` lost ``b``,
and a later batch with other keys crashed the run, leaving a valid-looking file with 0 rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from wirepipe.connectors.jsonl import JsonlSink, JsonlSource
from wirepipe.connectors.parquet import ParquetSink
from wirepipe.pipelines.pipeline import Pipeline

RECORDS = [
    {"a": 1}, {"a": 2, "b": "x"},                   # batch 1: b appears in the second record
    {"a": 3, "n": None}, {"a": 4, "n": None},       # batch 2: a field that is only null so far
    {"a": 5, "c": 1.5}, {"a": 6, "n": 7},           # batch 3: a new field, and n gets a type
    {"a": "seven"}, {"a": 8, "b": "y", "c": 2.5},   # batch 4: a type conflict, then a full record
]


def rows(files: list[Path]) -> list[dict]:
    out = []
    for f in files:
        out += pq.read_table(f).to_pylist()
    return out


@pytest.mark.parametrize("path", ["parts/p-{part}.parquet", "single/out.parquet"])
def test_no_field_is_dropped_and_a_conflict_is_dead_lettered(tmp_path: Path, path: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    sink = ParquetSink(tmp_path / path)
    dead = JsonlSink(tmp_path / "dead.jsonl")
    stats = Pipeline(JsonlSource(str(src), batch_size=2), [], sink, dead_letter=dead).run()
    files = sorted(f for f in tmp_path.rglob("*.parquet"))
    assert files == sorted(sink.files)
    got = rows(sink.files)
    expected = [r for r in RECORDS if r["a"] != "seven"]
    assert [r["a"] for r in got] == [r["a"] for r in expected], "every other record, in order"
    for want, have in zip(expected, got, strict=True):
        assert {k: v for k, v in have.items() if v is not None} == {k: v for k, v in want.items() if v is not None}
    assert {k for f in sink.files for k in pq.read_schema(f).names} == {"a", "b", "c", "n"}
    assert len(sink.files) >= 2, "the schema changed: a new file"
    assert stats.rejected == 1 and stats.records_out == len(expected)
    letter = json.loads((tmp_path / "dead.jsonl").read_text())
    assert json.loads(letter["value_json"]) == {"a": "seven"}
    assert "field 'a'" in letter["error"] and "int64" in letter["error"], letter["error"]
    print(path, {"sent": len(RECORDS), "written": len(got), "dead-lettered": 1, "files": len(sink.files),
                 "lost": len(RECORDS) - len(got) - 1})


def test_a_cyclic_value_in_a_typed_column_is_rejected_not_a_crash(tmp_path: Path) -> None:
    """Once a column has a type, conversion is typed (no inference); a cycle there must still be refused."""
    import asyncio


    cycle: list = []
    cycle.append(cycle)
    sink = ParquetSink(tmp_path / "p-{part}.parquet")
    dead = JsonlSink(tmp_path / "dead.jsonl")

    async def run() -> None:
        from wirepipe.testing import TestingSource

        # Two batches: the first fixes `v` as list<int64>, the second holds the cycle.
        batches = TestingSource.from_batches([[{"i": 0, "v": [1, 2]}],
                                              [{"i": 1, "v": [3]}, {"i": 2, "v": cycle}, {"i": 3, "v": []}]])
        stats = await Pipeline(batches, [], sink, dead_letter=dead).run_async()
        assert stats.rejected == 1 and stats.records_out == 3

    asyncio.run(run())
    assert [r["i"] for r in rows(sink.files)] == [0, 1, 3]
    assert "nested deeper" in json.loads((tmp_path / "dead.jsonl").read_text())["error"]
