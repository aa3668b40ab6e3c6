"""Pipelines from Python: both API shapes, file connectors, dead letters, metrics."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wirepipe as wp
from wirepipe.core.batch import Batch
from wirepipe.datasets import get_dataset
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize


def test_pipe_syntax_and_constructor_are_the_same_pipeline(tmp_path: Path) -> None:
    a = wp.generate_source("feed", count=300, batch_size=64) | wp.serialize("msgpack") | wp.compress("zstd", "fastest") \
        | wp.jsonl_sink(tmp_path / "a.jsonl")
    b = wp.Pipeline(wp.generate_source("feed", count=300, batch_size=64), [Serialize("msgpack"), Compress("zstd", "fastest")],
                    wp.jsonl_sink(tmp_path / "b.jsonl"))
    sa, sb = a.run(), b.run()
    assert sa.records_out == sb.records_out == 300
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_encoded_jsonl_decodes_back_to_the_dataset(tmp_path: Path) -> None:
    out = tmp_path / "tx.jsonl"
    (wp.generate_source("transaction", count=120, batch_size=50) | wp.encode("cbor|gzip:best") | wp.jsonl_sink(out)).run()
    decoded = tmp_path / "decoded.jsonl"
    (wp.jsonl_source(str(out), batch_size=7) | wp.decode("cbor|gzip") | wp.jsonl_sink(decoded)).run()
    back = [r for chunk in [b.values for b in _read_jsonl(decoded)] for r in chunk]
    assert back == get_dataset("transaction").sample(120)


def _read_jsonl(path: Path) -> list[Batch]:
    import asyncio

    src = wp.jsonl_source(str(path))

    async def collect() -> list[Batch]:
        return [b async for b in src.batches()]

    return asyncio.run(collect())


def test_jsonl_bytes_are_written_in_the_documented_form(tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    (wp.generate_source("point", count=3) | wp.serialize("msgpack") | wp.jsonl_sink(out)).run()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(line) == {"$base64"} for line in lines)


def test_parquet_sink_and_source_round_trip_payloads(tmp_path: Path) -> None:
    out = tmp_path / "blocks.parquet"
    (wp.generate_source("block", count=250, batch_size=40) | wp.encode("msgpack|lz4")
     | wp.parquet_sink(out, row_group_rows=100)).run()
    pf = pq.ParquetFile(out)
    assert pf.metadata.num_rows == 250
    assert pf.schema_arrow.field("value").type.equals(pa.binary())
    back = tmp_path / "back.parquet"
    (wp.parquet_source(str(out), batch_size=64) | wp.decode("msgpack|lz4") | wp.parquet_sink(back)).run()
    (wp.parquet_source(str(back)) | wp.jsonl_sink(tmp_path / "back.jsonl")).run()
    rows = [r for b in _read_jsonl(tmp_path / "back.jsonl") for r in b.values]
    assert rows == get_dataset("block").sample(250)


def test_parquet_schema_grows_inside_nested_records_and_rejects_only_conflicts(tmp_path: Path) -> None:
    """A nested field null in every record of the first batch (a log's ``error.stack``), a nested field that
    appears later: the schema grows (a new part) and no record is rejected; a value of another type than
    its nested column's is rejected alone, with the reason."""
    from wirepipe.connectors.parquet import ParquetSink
    from wirepipe.testing import TestingSink, TestingSource, run

    first = [{"i": i, "error": {"type": "io", "stack": None}} for i in range(10)]
    later = [{"i": i, "error": {"type": "io", "stack": "at main()", "code": i}} for i in range(10, 20)]
    conflict = [{"i": 20, "error": {"type": "io", "stack": "x", "code": "not a number"}}]
    sink = TestingSink()  # the rejected records
    stats = run(TestingSource(first + later + conflict, batch_size=10), [],
                         ParquetSink(str(tmp_path / "part-{part}.parquet")), dead_letter=sink)
    rows = [r for f in sorted(tmp_path.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert [r["i"] for r in rows] == list(range(20)) and stats.rejected == 1
    assert rows[0]["error"] == {"type": "io", "stack": None}  # the first part, before the schema grew
    assert rows[15]["error"] == {"type": "io", "stack": "at main()", "code": 15}
    assert [r.value["i"] for r in sink.rejects] == [20] and "'error'" in sink.rejects[0].error


def test_count_is_enforced_even_across_batches(tmp_path: Path) -> None:
    stats = (wp.generate_source("point", count=1005, batch_size=100) | wp.serialize("json") | wp.null_sink()).run()
    assert (stats.records_in, stats.records_out, stats.batches) == (1005, 1005, 11)


def test_corrupt_records_are_dead_lettered_and_the_rest_carry_on(tmp_path: Path) -> None:
    good = [Compress("zstd")(Serialize("msgpack")(Batch([{"i": i}]))).values[0] for i in range(5)]
    src = tmp_path / "in.jsonl"
    payloads = [good[0], b"not zstd", good[1], good[2][:-3], good[3],
                Compress("zstd")(Batch([b"\xc1 not msgpack"])).values[0], good[4]]
    with open(src, "w") as f:
        for p in payloads:
            f.write(json.dumps({"$base64": base64.b64encode(p).decode()}) + "\n")
        f.write("this line is not json\n")
    dead = tmp_path / "dead.jsonl"
    out = tmp_path / "out.jsonl"
    pipe = wp.Pipeline(wp.jsonl_source(str(src), batch_size=4), [Decompress("zstd"), Deserialize("msgpack")],
                       wp.jsonl_sink(out), dead_letter=wp.jsonl_sink(dead))
    stats = pipe.run()
    # record 2 was only sent truncated (seq 3), so it is dead-lettered, not delivered
    assert [json.loads(x)["i"] for x in out.read_text().splitlines()] == [0, 1, 3, 4]
    letters = [json.loads(x) for x in dead.read_text().splitlines()]
    assert [(d["stage"], d["seq"]) for d in letters] == [("decompress", 1), ("decompress", 3), ("read", 7),
                                                         ("deserialize", 5)]
    assert all(d["error"] for d in letters)
    assert stats.rejected == 4 and stats.rejected_by_stage == {"read": 1, "decompress": 2, "deserialize": 1}
    # The dead letter keeps the payload exactly as it entered the failing stage.
    by_seq = {d["seq"]: d for d in letters}
    assert base64.b64decode(by_seq[1]["payload"]["$base64"]) == b"not zstd"


def test_pickle_deserialize_is_refused_at_build_time() -> None:
    from wirepipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="allow_pickle") as info:  # what the YAML entry gets, at its path
        Deserialize("pickle")
    assert info.value.path == "deserialize"
    assert Deserialize("pickle", allow_pickle=True)(Serialize("pickle")(Batch([{"a": 1}]))).values == [{"a": 1}]


def test_auto_decoding_reads_the_headers() -> None:
    batch = Compress("brotli", 5)(Serialize("cbor")(Batch([{"k": b"v"}, {"k": b"w"}])))
    assert batch.headers == {"Content-Type": "application/cbor", "Content-Encoding": "br"}
    assert Deserialize("auto")(Decompress("auto")(batch)).values == [{"k": b"v"}, {"k": b"w"}]


def test_auto_decoding_per_record_headers_and_unknown_encoding() -> None:
    a = Compress("gzip")(Serialize("json")(Batch([{"n": 1}])))
    b = Compress("lz4")(Serialize("msgpack")(Batch([{"n": 2}])))
    mixed = Batch([*a.values, b"x", *b.values],
                  headers=[a.headers, {"Content-Encoding": "snappy", "Content-Type": "application/json"}, b.headers],
                  meta={"seq": [0, 1, 2]})
    out = Deserialize("auto")(Decompress("auto")(mixed))
    assert out.values == [{"n": 1}, {"n": 2}]
    assert [(r.stage, r.meta["seq"]) for r in out.rejected] == [("decompress", 1)]
    assert "snappy" in out.rejected[0].error


def test_pickle_by_header_is_refused_per_record() -> None:
    batch = Serialize("pickle")(Batch([{"a": 1}]))
    out = Deserialize("auto")(batch)
    assert out.values == [] and "allow_pickle" in out.rejected[0].error


def test_metrics_rows_for_every_stage_of_every_batch(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    pipe = wp.Pipeline(wp.generate_source("point", count=2500, batch_size=1000),
                       [Serialize("msgpack"), Compress("zstd", "fastest")], wp.null_sink(), metrics=path)
    pipe.run()
    table = pq.read_table(path)
    rows = table.to_pylist()
    assert [r["stage"] for r in rows[:4]] == ["generate", "serialize", "compress", "write"]
    assert len(rows) == 3 * 4
    serialize = [r for r in rows if r["stage"] == "serialize"]
    assert [r["records"] for r in serialize] == [1000, 1000, 500]
    assert [r["bytes_in"] for r in serialize] == [8000, 8000, 4000]  # declared raw size
    assert [r["bytes_out"] for r in serialize] == [7000, 7000, 3500]  # 7 bytes per msgpack point
    assert all(r["end_ns"] >= r["start_ns"] for r in rows)
    assert json.loads(serialize[0]["params"]) == {"format": "msgpack"}
    meta = pq.read_schema(next(path.glob("part-*.parquet"))).metadata
    assert meta[b"wirepipe.pipeline"] == b"pipeline"


def test_typed_records_from_a_dataclass_schema() -> None:
    batch = Serialize("msgpack-array", schema="tests.records:Point")(Batch([{"x": 1, "y": 2}]))
    out = Deserialize("msgpack-array", schema="tests.records:Point")(batch)
    from tests.records import Point

    assert out.values == [Point(1, 2)]
    assert Serialize("msgpack")(Batch([Point(3, 4)])).values == [b"\x82\xa1x\x03\xa1y\x04"]


def test_select_map_filter() -> None:
    from wirepipe.operators.filter import Filter
    from wirepipe.operators.map import Map
    from wirepipe.operators.select import Select

    batch = Batch([{"a": i, "b": i * 2, "c": 0} for i in range(6)], meta={"seq": list(range(6))})
    batch = Select(["b", "a"])(batch)
    batch = Filter("tests.records:is_even_a")(batch)
    batch = Map(lambda r: {**r, "s": r["a"] + r["b"]})(batch)
    assert batch.values == [{"b": 0, "a": 0, "s": 0}, {"b": 4, "a": 2, "s": 6}, {"b": 8, "a": 4, "s": 12}]
    assert batch.meta["seq"] == [0, 2, 4]


@pytest.mark.parametrize("fmt", ["msgpack", "json", "cbor", "arrow"])
def test_pack_and_unpack_carry_several_records_per_message(fmt: str, tmp_path: Path) -> None:
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.unpack import Unpack

    records = get_dataset("block").sample(25, seed=4)
    batch = Batch(list(records), meta={"seq": list(range(25)), "ack": [f"a{i}" for i in range(25)]})
    batch = Compress("zstd")(Serialize(fmt)(Pack(10)(batch)))
    assert len(batch.values) == 3 and batch.meta["seq"] == [0, 10, 20]
    out = Unpack()(Deserialize(fmt)(Decompress("zstd")(batch)))
    assert out.values == records
    # a message is acknowledged once: only its first record carries the handle
    assert [a for a in out.meta["ack"] if a is not None] == ["a0", "a10", "a20"]
    assert out.meta["seq"] == [0] * 10 + [10] * 10 + [20] * 5


def test_unpack_dead_letters_a_value_that_is_not_a_list() -> None:
    from wirepipe.operators.unpack import Unpack

    out = Unpack()(Batch([[1, 2], {"not": "a list"}, [3]], meta={"seq": [0, 1, 2]}))
    assert out.values == [1, 2, 3] and out.meta["seq"] == [0, 0, 2]
    assert [(r.stage, r.meta["seq"]) for r in out.rejected] == [("unpack", 1)]


def test_pack_in_yaml(tmp_path: Path) -> None:
    from wirepipe.pipelines.config import build_pipeline, validate_config

    cfg = validate_config({"name": "p", "source": {"type": "generate", "dataset": "point", "count": 95},
                           "operators": [{"pack": {"records": 10}}, {"encode": "msgpack|lz4"},
                                         {"decode": "msgpack|lz4"}, {"unpack": None}],
                           "sink": {"type": "jsonl", "path": str(tmp_path / "o.jsonl")}})
    stats = build_pipeline(cfg).run()
    assert stats.records_out == 95
    rows = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert rows == get_dataset("point").sample(95)


async def test_appending_to_a_jsonl_file_a_killed_writer_tore_cuts_the_torn_line(tmp_path: Path) -> None:
    from wirepipe.connectors.jsonl import JsonlSink

    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"i": 0}\n{"i": 1}\n{"i": 2, "torn')  # a writer killed mid-line
    sink = JsonlSink(path, append=True)
    await sink.open()
    await sink.write(Batch([{"i": 3}]))
    await sink.close()
    assert path.read_bytes().splitlines() == [b'{"i": 0}', b'{"i": 1}', b'{"i":3}']


# --- `|` builds new pipelines; headers records come with survive the codecs ------------------------------


def test_pipe_returns_a_new_pipeline_and_leaves_the_base_as_it_was(tmp_path: Path) -> None:
    dead = wp.jsonl_sink(tmp_path / "dead.jsonl")
    base = wp.Pipeline(wp.generate_source("point", count=20, batch_size=8), [Serialize("msgpack")], name="base",
                       dead_letter=dead, queue_size=3, flush_interval=0.25, shutdown_timeout=7.0)
    zstd = base | wp.compress("zstd")
    lz4 = base | [wp.compress("lz4")]
    assert zstd is not base and lz4 is not base and zstd is not lz4
    assert [op.name for op in base.operators] == ["msgpack"]
    assert [op.name for op in zstd.operators] == ["msgpack", "zstd"]
    assert [op.name for op in lz4.operators] == ["msgpack", "lz4"]
    out = zstd | wp.jsonl_sink(tmp_path / "zstd.jsonl")
    assert zstd.sink is None and out.sink is not None and out.operators == zstd.operators
    assert out.operators is not zstd.operators  # a list of its own: extending one never changes the other
    # everything else of the original is kept
    for p in (zstd, lz4, out):
        assert (p.name, p.dead_letter, p.queue_size, p.flush_interval, p.shutdown_timeout, p.source) == \
            ("base", dead, 3, 0.25, 7.0, base.source)
    assert out.run().records_out == 20
    assert base.sink is None  # running the derived pipeline did not touch the base
    with pytest.raises(TypeError):
        base | 42


def test_a_per_record_header_survives_serialize_and_compress_to_the_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace header a source gave each record (as a NATS source does) reaches the sink, with the wire headers
    added beside it; the columnar pass does it (the per-record fallback would reject every record here)."""
    from wirepipe.testing import TestingSink, TestingSource, run

    def no_fallback(self: Serialize, value: object) -> bytes:
        raise AssertionError("serialize fell back to the record-by-record pass")

    monkeypatch.setattr(Serialize, "_explained", no_fallback)
    traces = [{"traceparent": f"00-{i:032x}-{i:016x}-01"} for i in range(10)]
    traces[3] = {"traceparent": traces[3]["traceparent"], "Content-Encoding": "gzip"}  # as received: now stale
    sink = TestingSink()
    stats = run(TestingSource([{"i": i} for i in range(10)], batch_size=4, headers=traces),
                [wp.serialize("msgpack"), wp.compress("zstd")], sink)
    assert stats.rejected == 0 and stats.records_out == 10
    assert [h["traceparent"] for h in sink.headers] == [t["traceparent"] for t in traces]
    assert all(h["Content-Type"] == "application/msgpack" and h["Content-Encoding"] == "zstd" for h in sink.headers)
    back = Deserialize("auto")(Decompress("auto")(Batch(sink.records, headers=sink.headers)))
    assert back.values == [{"i": i} for i in range(10)]
    # serialize alone: the bytes are new and uncompressed, so a Content-Encoding they came with is dropped
    plain = Serialize("json")(Batch([{"i": 1}], headers=[{"traceparent": "t", "Content-Encoding": "gzip"}]))
    assert plain.headers == [{"traceparent": "t", "Content-Type": "application/json"}]
    # records without headers keep the one shared dict (the sinks' fast path)
    assert Serialize("json")(Batch([{"i": 1}, {"i": 2}], headers=[None, {}])).headers == \
        {"Content-Type": "application/json"}


def test_the_operators_declare_the_headers_they_set() -> None:
    from wirepipe.operators.operator import Operator
    from wirepipe.wire import Header

    assert Serialize.adds_headers == (Header.CONTENT_TYPE, Header.SCHEMA)
    assert Operator.adds_headers == ()
    batch = Serialize("json", schema={"i": "int64"})(Batch([{"i": 1}]))
    assert set(Serialize.adds_headers) <= set(batch.headers)


def test_the_summary_names_the_dead_letter_only_when_a_record_went_to_it(tmp_path: Path) -> None:
    """A configured dead letter nothing was written to is no output of the run: its summary does not name it (a
    "dead letters: ... (0.00 MB)" line read as if something had gone there); one record rejected and it does."""
    from wirepipe.pipelines.monitor import run_summary
    from wirepipe.testing import TestingSource

    dead = tmp_path / "dead.jsonl"
    for values, named in (([{"x": 1}, {"x": 2}], False), ([{"x": 1}, {"x": "two"}], True)):
        pipe = wp.Pipeline(TestingSource(values), [wp.map_values(lambda v: {"x": v["x"] + 1})],
                           wp.jsonl_sink(tmp_path / "out.jsonl"), dead_letter=wp.jsonl_sink(dead), name="p")
        stats = pipe.run()
        assert pipe.last_run is not None
        lines = run_summary(pipe.last_run, stats).splitlines()
        assert (stats.rejected, [x for x in lines if "dead letters" in x]) == (
            (1, [f"  dead letters: jsonl {dead} ({dead.stat().st_size / 1e6:,.2f} MB)"]) if named else (0, []))
