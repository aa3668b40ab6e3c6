"""``wirepipe.testing``: the public harness tests and benchmarks run pipelines with."""

from __future__ import annotations

import asyncio

import pytest

from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.filter import Filter
from wirepipe.operators.map import Map
from wirepipe.operators.serialize import Serialize
from wirepipe.testing import TestingSink, TestingSource, run, run_async


def test_records_come_out_in_order_in_batches_of_batch_size() -> None:
    sink = TestingSink()
    stats = run(TestingSource(range(10), batch_size=4), [Map(lambda v: v + 100)], sink)
    assert sink.records == list(range(100, 110))
    assert stats.batches == sink.batches == 3  # 4 + 4 + 2
    assert sink.meta["seq"] == list(range(10))
    assert sink.count == stats.records_out == 10 and sink.flushes >= 1


def test_a_real_codec_chain_round_trips() -> None:
    records = [{"x": i, "y": -i} for i in range(250)]
    sink = TestingSink()
    run(TestingSource(records, batch_size=100),
        [Serialize("msgpack"), Compress("zstd"), Decompress("zstd"), Deserialize("msgpack")], sink)
    assert sink.records == records


def test_rejects_reach_the_sink_by_default_and_the_given_dead_letter_otherwise() -> None:
    sink = TestingSink()
    stats = run(TestingSource([1, 0, 2, 0], batch_size=3), [Map(lambda v: 10 // v)], sink)
    assert sink.records == [10, 5]
    assert [(r.stage, r.value) for r in sink.rejects] == [("map", 0), ("map", 0)]
    assert "ZeroDivisionError" in sink.rejects[0].error and stats.rejected == 2

    dead = TestingSink()
    sink = TestingSink()
    run(TestingSource([1, 0]), [Map(lambda v: 10 // v)], sink, dead_letter=dead)
    assert sink.rejects == [] and [r.value for r in dead.rejects] == [0]


def test_subjects_and_headers_per_record_or_shared() -> None:
    sink = TestingSink()
    run(TestingSource(["a", "b", "c"], batch_size=2, subjects=["s.0", "s.1", "s.2"], headers={"k": "v"}),
        [Filter(lambda v: v != "b")], sink)
    assert sink.records == ["a", "c"]
    assert sink.subjects == ["s.0", "s.2"]
    assert sink.headers == [{"k": "v"}, {"k": "v"}]


def test_from_batches_hands_over_the_lists_themselves() -> None:
    chunks = [[1, 2], [3], [4, 5, 6]]
    source = TestingSource.from_batches(chunks, schema=("x",), raw_record_nbytes=8)

    async def collect() -> list:
        return [b async for b in source.batches()]

    batches = asyncio.run(collect())
    assert [b.values for b in batches] == chunks and all(b.values is c for b, c in zip(batches, chunks, strict=True))
    assert [list(b.meta["seq"]) for b in batches] == [[0, 1], [2], [3, 4, 5]]
    assert [b.raw_nbytes for b in batches] == [16, 8, 24] and batches[0].schema == ("x",)


def test_meta_columns_are_cut_per_batch_like_subjects_and_headers() -> None:
    sent = [100, None, 300, 400, 500]
    source = TestingSource(list("abcde"), batch_size=2, meta={"sent_ns": sent, "received_ns": range(5)})

    async def collect(s: TestingSource) -> list:
        return [b async for b in s.batches()]

    batches = asyncio.run(collect(source))
    assert [b.meta["sent_ns"] for b in batches] == [[100, None], [300, 400], [500]]
    assert [b.meta["received_ns"] for b in batches] == [[0, 1], [2, 3], [4]]
    assert [list(b.meta["seq"]) for b in batches] == [[0, 1], [2, 3], [4]]
    sink = TestingSink()
    run(TestingSource.from_batches([[1, 2, 3], [4]], meta={"sent_ns": [7, 8, 9, 10], "seq": [50, 51, 52, 53]}),
        [Filter(lambda v: v != 2)], sink)
    assert sink.meta == {"seq": [50, 52, 53], "sent_ns": [7, 9, 10]}  # a given seq replaces the positions


def test_a_meta_column_needs_one_value_per_record() -> None:
    with pytest.raises(ValueError, match=r"meta\['sent_ns'\]: expected one value per record \(3\), got 2 values"):
        TestingSource([1, 2, 3], meta={"sent_ns": [1, 2]})
    with pytest.raises(ValueError, match="got a str"):
        TestingSource.from_batches([["x"]], meta={"tag": "x"})


def test_a_single_subject_names_the_records() -> None:
    assert TestingSource([1], subjects="orders.eu").params == {"records": 1, "batch_size": 1000, "subject": "orders.eu"}
    assert "subject" not in TestingSource([1], subjects=["a"]).params


def test_keep_false_only_counts() -> None:
    sink = TestingSink(keep=False)
    stats = run(TestingSource(range(1000), batch_size=100), [], sink)
    assert sink.records == [] and sink.count == stats.records_out == 1000 and sink.batches == 10


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_batch_size_must_be_a_whole_number_of_at_least_one(bad: object) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        TestingSource([1], batch_size=bad)  # type: ignore[arg-type]


def test_run_async_and_source_pipe_composition() -> None:
    sink = TestingSink()
    pipeline = TestingSource([1, 2, 3]) | Map(lambda v: -v) | sink
    asyncio.run(pipeline.run_async())
    assert sink.records == [-1, -2, -3]

    sink = TestingSink()
    stats = asyncio.run(run_async(TestingSource("abc", batch_size=1), [], sink))
    assert sink.records == ["a", "b", "c"] and stats.batches == 3


def test_the_documented_example_runs() -> None:
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs" / "how-to" / "test-pipelines.md").read_text(encoding="utf-8")
    section = page.split("## Testing a pipeline: `wirepipe.testing`", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/how-to/test-pipelines.md", "exec"), {})  # its asserts are the test


def test_between_runs_a_yaml_pipeline_on_other_ends(tmp_path) -> None:
    from wirepipe.pipelines.config import load_pipeline
    from wirepipe.testing import between

    path = tmp_path / "p.yaml"
    path.write_text(f"""name: p
source: {{type: nats, url: "nats://127.0.0.1:1", subject: "in.>"}}
operators: [{{deserialize: {{format: json}}}}, {{select: [a]}}]
sink: {{type: jsonl, path: "{tmp_path / 'out.jsonl'}"}}
dead_letter: {{type: jsonl, path: "{tmp_path / 'dead.jsonl'}"}}
""")
    pipe = load_pipeline(path)
    sink = TestingSink()
    stats = between(pipe, TestingSource([b'{"a": 1, "b": 2}', b"{oops"]), sink).run()
    assert sink.records == [{"a": 1}] and [r.stage for r in sink.rejects] == ["deserialize"]
    assert stats.records_in == 2 and not (tmp_path / "out.jsonl").exists() and not (tmp_path / "dead.jsonl").exists()
