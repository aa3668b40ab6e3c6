"""Metrics rows: exact sizes, latency rows, crash-safe part folders, a SIGKILLed worker."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.cli import start_wirepipe, wirepipe
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.null import NullSink
from wirepipe.core.errors import WirepipeError
from wirepipe.metrics.columns import BENCH_COLUMNS, LATENCY_COLUMNS, STAGE_COLUMNS
from wirepipe.metrics.recorder import MetricsRecorder
from wirepipe.metrics.run_metadata import latency_path
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.operators.unpack import Unpack
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.storage.files import temp_path
from wirepipe.storage.parts import PartWriter, list_parts, part_name
from wirepipe.study.report import load_results, summarize
from wirepipe.testing import TestingSource


def test_point_through_msgpack_is_seven_bytes_per_record(tmp_path: Path) -> None:
    """{x, y} with values < 128: fixmap(1) + "x"(2) + fixint(1) + "y"(2) + fixint(1) = 7 bytes."""
    path = tmp_path / "points.parquet"
    pipe = Pipeline(GenerateSource("point", count=2345, batch_size=500), [Serialize("msgpack")], NullSink(),
                    name="points", metrics=path)
    pipe.run()
    rows = pq.read_table(path).to_pylist()
    ser = [r for r in rows if r["stage"] == "serialize"]
    assert [r["records"] for r in ser] == [500, 500, 500, 500, 345]
    assert all(r["bytes_out"] == 7 * r["records"] for r in ser)
    assert all(r["bytes_in"] == 8 * r["records"] for r in ser)  # the declared raw size of Point
    sink = [r for r in rows if r["stage"] == "write"]
    assert all(r["bytes_in"] == r["bytes_out"] == 7 * r["records"] for r in sink)
    assert {r["step"] for r in rows} == {0, 1, 2}
    assert all(r["end_ns"] >= r["start_ns"] for r in rows)
    assert {r["operator"] for r in ser} == {"msgpack"} and ser[0]["params"] == '{"format": "msgpack"}'


def test_stages_of_a_batch_follow_one_another_and_sizing_is_not_timed(tmp_path: Path) -> None:
    """Each operator's output is sized between its end and the next operator's start, so the stage rows
    of one batch are ordered and disjoint, and every column's bytes are exact."""
    path = tmp_path / "m.parquet"
    ops = [Serialize("msgpack"), Compress("zstd", "fastest"), Decompress("zstd"), Deserialize("msgpack")]
    Pipeline(GenerateSource("point", count=3000, batch_size=1000), ops, NullSink(), metrics=path).run()
    rows = sorted(pq.read_table(path).to_pylist(), key=lambda r: (r["batch"], r["step"]))
    by_batch: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_batch.setdefault(r["batch"], []).append(r)
    assert len(by_batch) == 3
    for stages in by_batch.values():
        assert [r["stage"] for r in stages] == ["generate", "serialize", "compress", "decompress", "deserialize",
                                                 "write"]
        for before, after in itertools.pairwise(stages):
            assert before["end_ns"] <= after["start_ns"] and after["start_ns"] <= after["end_ns"]
            if after["stage"] != "write":
                assert after["bytes_in"] == (before["bytes_out"] if before["stage"] != "generate" else 8000)
        ser, comp, dec = stages[1:4]
        assert ser["bytes_out"] == dec["bytes_out"] == 7000 and 7000 < comp["bytes_out"] < 30000
        assert stages[4]["bytes_out"] is None  # objects have no wire size


def test_every_file_carries_the_run_metadata_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    Pipeline(GenerateSource("point", count=100), [Serialize("msgpack")], NullSink(), name="meta",
             metrics=path).run()
    files = list_parts(path)
    assert len(files) == 1
    schema = pq.read_schema(files[0])
    assert schema.names == list(STAGE_COLUMNS)
    meta = {k.decode(): v.decode() for k, v in schema.metadata.items()}
    for key in ("run_id", "pipeline", "config", "versions", "host", "started_at", "clock", "table"):
        assert f"wirepipe.{key}" in meta
    assert meta["wirepipe.pipeline"] == "meta"
    assert '"pyarrow"' in meta["wirepipe.versions"] and '"cpus"' in meta["wirepipe.host"]


def stamped(batches: list[tuple[list[int | None], list[int]]]) -> TestingSource:
    """Consumer-like batches: ``sent_ns`` / ``received_ns`` in the meta, as the NATS sources fill them."""
    return TestingSource.from_batches([[b"\x82\xa1x\x01\xa1y\x02"] * len(sent) for sent, _ in batches],
                                      meta={"sent_ns": [s for sent, _ in batches for s in sent],
                                            "received_ns": [r for _, received in batches for r in received]})


def test_latency_rows_per_record(tmp_path: Path) -> None:
    now = time.time_ns()
    first = ([now - 5_000_000 + i for i in range(4)], [now - 4_000_000 + i for i in range(4)])  # 1 ms transit
    second = ([now - 3_000_000, None, now - 3_000_000], [now - 1_000_000] * 3)  # 2 ms, one without the header
    no_header = ([None, None], [now, now])  # headers: none -> no latency rows at all
    path = tmp_path / "consume.parquet"
    before = time.time_ns()
    Pipeline(stamped([first, second, no_header]), [Deserialize("msgpack")], NullSink(), name="consumer",
             metrics=path).run()
    after = time.time_ns()
    lat = pq.read_table(latency_path(path))
    assert lat.schema.names == list(LATENCY_COLUMNS)
    rows = lat.to_pylist()
    assert [r["seq"] for r in rows] == [0, 1, 2, 3, 4, 5, 6]
    assert [r["batch"] for r in rows] == [0, 0, 0, 0, 1, 1, 1]
    assert [r["sent_ns"] for r in rows] == [*first[0], *second[0]]
    assert [r["received_ns"] for r in rows] == [*first[1], *second[1]]
    assert all(before <= r["done_ns"] <= after for r in rows)
    assert rows[0]["stream_seq"] is None

    res = load_results([path])
    (g,) = summarize(res.stages, res.latency, res.runs).groups
    transit = g.latency["transit"]
    assert transit.count == 6 and transit.min == 1_000_000 and transit.max == 2_000_000
    assert transit.p50 == 1_000_000 and transit.p90 == 2_000_000
    e2e = g.latency["end_to_end"]
    assert e2e.count == 6 and e2e.min >= 3_000_000 and e2e.max >= 5_000_000 - 3


def test_latency_rows_stand_for_the_records_that_share_their_values(tmp_path: Path) -> None:
    """Records unpacked from one message share its times: one row for them, ``records`` saying how many; the
    report's figures count every record."""
    import msgpack

    now = time.time_ns()
    messages = [[{"x": i, "y": j} for j in range(n)] for i, n in enumerate((3, 1, 4, 2))]
    sent = [now - 5_000_000, now - 5_000_000, now - 4_000_000, now - 3_000_000]
    received = [now - 2_000_000, now - 2_000_000, now - 2_000_000, now - 1_000_000]
    source = TestingSource.from_batches([[msgpack.packb(m) for m in messages]],
                                        meta={"sent_ns": sent, "received_ns": received})
    path = tmp_path / "consume.parquet"
    Pipeline(source, [Deserialize("msgpack"), Unpack()], NullSink(), name="consumer", metrics=path).run()
    rows = pq.read_table(latency_path(path)).to_pylist()
    assert [(r["sent_ns"], r["received_ns"], r["records"]) for r in rows] == [
        (sent[0], received[0], 3), (sent[1], received[1], 1), (sent[2], received[2], 4), (sent[3], received[3], 2)]
    # the first two messages share their times but not their `seq` (TestingSource numbers them): a row each

    res = load_results([path])
    (g,) = summarize(res.stages, res.latency, res.runs).groups
    transit = g.latency["transit"]
    assert transit.count == 10 and transit.min == 2_000_000 and transit.max == 3_000_000
    assert (transit.p50, transit.p90) == (2_000_000, 3_000_000)  # 6 records at 2 ms, 4 at 3 ms


def test_latency_rows_of_unpacked_messages_read_one_value_a_message(tmp_path: Path) -> None:
    """Unpacked columns are read a message at a time (``Repeated``'s runs): equal neighbours still share a row,
    a message of no records has none, a message without the header keeps its null."""
    import msgpack

    counts = [3, 1, 2, 0, 4, 2]
    messages = [[{"x": i, "y": j} for j in range(n)] for i, n in enumerate(counts)]
    source = TestingSource.from_batches([[msgpack.packb(m) for m in messages]],
                                        meta={"seq": [1, 1, 2, 3, 4, 4], "sent_ns": [5, 5, None, 7, 8, 9],
                                              "received_ns": [10, 10, 11, 11, 12, 12]})
    path = tmp_path / "consume.parquet"
    Pipeline(source, [Deserialize("msgpack"), Unpack()], NullSink(), name="consumer", metrics=path).run()
    rows = pq.read_table(latency_path(path)).to_pylist()
    assert [(r["seq"], r["sent_ns"], r["received_ns"], r["records"]) for r in rows] == [
        (1, 5, 10, 4), (2, None, 11, 2), (4, 8, 12, 4), (4, 9, 12, 2)]


def test_latency_off_records_none(tmp_path: Path) -> None:
    now = time.time_ns()
    rec = MetricsRecorder(tmp_path / "x.parquet", latency=False)
    Pipeline(stamped([([now], [now])]), [], NullSink(), metrics=rec).run()
    assert not latency_path(tmp_path / "x.parquet").exists()


def test_in_memory_recorder_tables() -> None:
    rec = MetricsRecorder(None, pipeline="mem")
    Pipeline(GenerateSource("point", count=300, batch_size=100), [Serialize("msgpack"), Compress("zstd")],
             NullSink(), metrics=rec).run()
    stages, latency = rec.tables()
    assert stages.num_rows == 3 * 4 and latency.num_rows == 0
    assert stages.column("pipeline").unique().to_pylist() == ["mem"]


def test_empty_run_is_still_listed(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    Pipeline(GenerateSource("point", count=0), [Serialize("msgpack")], NullSink(), metrics=path).run()
    (f,) = list_parts(path)
    assert pq.read_table(f).num_rows == 0 and pq.read_schema(f).metadata[b"wirepipe.run_id"]


def test_yaml_python_and_a_recorder_made_by_hand_record_with_one_set_of_defaults(tmp_path: Path) -> None:
    from wirepipe.metrics.recorder import MetricsConfig
    from wirepipe.pipelines.config import build_pipeline, validate_config

    def settings(recorder: MetricsRecorder) -> tuple[Any, ...]:
        return recorder.row_group_rows, recorder.flush_interval, recorder.latency, recorder.compact_parts

    source = {"type": "generate", "dataset": "point", "count": 1}
    from_yaml = build_pipeline(validate_config({"name": "y", "source": source,
                                                "metrics": {"path": str(tmp_path / "y.parquet")}}))
    from_python = Pipeline(GenerateSource("point", count=1), [], NullSink(), metrics=str(tmp_path / "p.parquet"))
    for pipe in (from_yaml, from_python):
        pipe.run()
    defaults = MetricsConfig(path="any")
    assert from_yaml.last_run is not None and from_python.last_run is not None
    assert settings(from_yaml.last_run.metrics) == settings(from_python.last_run.metrics) == \
        settings(MetricsRecorder(None)) == (
        defaults.row_group_rows, defaults.flush_interval, defaults.latency, defaults.compact_parts)


def test_metrics_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.parquet"
    path.write_bytes(b"not a folder")
    pipe = Pipeline(GenerateSource("point", count=10), [], NullSink(), metrics=path)
    with pytest.raises(WirepipeError, match="folder of Parquet parts"):
        pipe.run()


# --- the part folder ------------------------------------------------------------------------------


def _table(start: int, n: int) -> pa.Table:
    return pa.table({"i": pa.array(range(start, start + n), pa.int64())})


def test_parts_are_merged_and_every_row_kept_once(tmp_path: Path) -> None:
    folder = tmp_path / "ds.parquet"
    schema = pa.schema([("i", pa.int64())], metadata={"k": "v"})
    w = PartWriter(folder, "run1", schema, compact_parts=4, max_file_rows=200)
    for k in range(37):
        w.write(_table(10 * k, 10))
    w.close()
    files = list_parts(folder)
    # 37 flushes of 10 rows, merged 4 at a time up to 200 rows: two level-2 files of 16 flushes (160 rows;
    # four of them would pass 200), then at close the tail (32-35 merged, and 36) as one file
    assert [f.name for f in files] == [part_name("run1", 0, 15), part_name("run1", 16, 31),
                                       part_name("run1", 32, 36)]
    assert pq.read_table(folder).column("i").to_pylist() == list(range(370))
    assert pq.read_schema(files[0]).metadata == {b"k": b"v"}
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]


def test_a_merge_killed_before_deleting_its_inputs_counts_no_row_twice(tmp_path: Path) -> None:
    folder = tmp_path / "ds.parquet"
    folder.mkdir()
    for n in range(3):
        pq.write_table(_table(10 * n, 10), folder / part_name("r", n, n))
    pq.write_table(_table(0, 20), folder / part_name("r", 0, 1))  # merged 0..1, inputs not deleted yet
    temp_path(folder / part_name("r", 2, 2), owner=999_999_999).write_bytes(b"half a file")  # a dead writer's
    names = [f.name for f in list_parts(folder)]
    assert names == [part_name("r", 0, 1), part_name("r", 2, 2)]
    # the next writer on the folder tidies up what the dead one left
    PartWriter(folder, "next", pa.schema([("i", pa.int64())])).close()
    assert sorted(p.name for p in folder.iterdir()) == [part_name("r", 0, 1), part_name("r", 2, 2)]


def test_writer_errors_surface_at_close(tmp_path: Path) -> None:
    folder = tmp_path / "ds.parquet"
    w = PartWriter(folder, "r", pa.schema([("i", pa.int64())]))
    w.write(pa.table({"other": [1]}))  # does not match the schema
    with pytest.raises(WirepipeError, match="writing results"):
        w.close()


# --- values a column cannot hold ------------------------------------------------------------------


INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def test_values_a_column_cannot_hold_are_clamped_or_nulled_counted_and_their_rows_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Whatever reaches the recorder, every row is written; each value changed to fit is counted, each column
    warned about once."""
    from wirepipe.core.batch import Batch

    path = tmp_path / "absurd.parquet"
    rec = MetricsRecorder(path, flush_interval=None)
    rec.open([("consume", "nats", {}), ("write", "null", {})])
    absurd = [10**29, -(10**29), float("nan"), float("inf"), "12", True, 7]
    for i, lost in enumerate(absurd):
        rec.record_batch(i, (1, 2), ([], [], [5], [0], [None], [0], [5]), lost=lost)
        sent = [10**30, float("nan"), 3, 4, 5]  # a forged Wirepipe-Sent-At, a value that is no integer
        rec.stamp_sink(i, Batch([b"x"] * 5, meta={"sent_ns": sent, "received_ns": [1, 2, 3, 4, 5],
                                                  "seq": [2**64, 1, 2, 3, 4]}), 3, 4)
    with caplog.at_level("WARNING", logger="wirepipe"):
        rec.close()
    stages = pq.read_table(path).to_pylist()
    latency = pq.read_table(latency_path(path)).to_pylist()
    assert len(stages) == 2 * 7 and len(latency) == 5 * 7, "no row dropped"
    assert [r["lost"] for r in stages if r["step"] == 0] == [INT64_MAX, INT64_MIN, None, INT64_MAX, None, None, 7]
    assert [r["sent_ns"] for r in latency[:5]] == [INT64_MAX, None, 3, 4, 5]
    assert [r["seq"] for r in latency[:5]] == [INT64_MAX, 1, 2, 3, 4]
    assert rec.figures()["metrics_values_fixed"] == 6 + 7 * 3  # lost: 6 of 7; per batch: sent_ns 2, seq 1
    warned = [r.getMessage() for r in caplog.records if "cannot hold" in r.getMessage()]
    # once a column (latency values are fitted as the batch is stamped, stage values at the flush)
    assert sorted(w.split(" column")[0] for w in warned) == ["metrics: the lost", "metrics: the sent_ns",
                                                             "metrics: the seq"], warned


async def test_a_forged_sent_at_header_keeps_every_metrics_row(nats_url: str, tmp_path: Path) -> None:
    """3,002 records through core NATS, one with ``Wirepipe-Sent-At: 99999999999999999999999999999``: every
    stage and latency row is in the Parquet files, the forged value clamped and counted in the summary."""
    import nats

    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.pipelines.monitor import run_summary
    from wirepipe.testing import TestingSink

    n = 3002
    path = tmp_path / "forged.parquet"
    source = NatsSource("forged", url=nats_url, count=n, batch_size=1000)
    pipe = Pipeline(source, [], TestingSink(), name="forged", metrics=path)
    task = asyncio.ensure_future(pipe.run_async())
    while not source.ready.is_set():
        assert not task.done()
        await asyncio.sleep(0.01)
    nc = await nats.connect(nats_url)
    for i in range(n):
        sent = "99999999999999999999999999999" if i == 1500 else str(time.time_ns())
        await nc.publish("forged", b"%d" % i, headers={"Wirepipe-Sent-At": sent})
    await nc.flush()
    await nc.close()
    stats = await asyncio.wait_for(task, 30)
    stages = pq.read_table(path).to_pylist()
    latency = pq.read_table(latency_path(path)).to_pylist()
    assert stats.records_out == n and sum(r["records"] for r in stages if r["step"] == 0) == n
    assert len(stages) == 2 * stats.batches
    assert len(latency) == n and [r["sent_ns"] for r in latency].count(INT64_MAX) == 1
    assert stats.metrics is not None and stats.metrics["metrics_values_fixed"] == 1
    from wirepipe.pipelines.monitor import snapshot
    from wirepipe.pipelines.prometheus import MetricsCollector

    exported = {m.name: m.samples[0].value for m in MetricsCollector(lambda: [({}, snapshot(pipe.last_run))]).collect()}
    assert (exported["wirepipe_metrics_values_fixed"], exported["wirepipe_metrics_up"]) == (1.0, 1.0)
    assert "metrics: " + str(path) + " (1 value(s) a column could not hold, clamped or nulled (rows kept))" \
        in run_summary(pipe.last_run, stats)


async def test_records_discarded_at_the_stop_are_on_the_lost_column(nats_url: str, tmp_path: Path) -> None:
    """Core NATS: what the client held and the pipeline never took is lost at the stop (a member of a queue group
    that reached its count took them from the others; a clean drain finishes what it held otherwise); a source
    row of no records carries it, so the ``lost`` column adds up to the summary's figure."""
    import nats

    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.testing import TestingSink

    gate = asyncio.Event()

    class GatedSink(TestingSink):
        async def write(self, batch: Any) -> None:
            await gate.wait()
            await super().write(batch)

    n = 2000
    path = tmp_path / "stop.parquet"
    source = NatsSource("stop", url=nats_url, batch_size=100, queue="stoppers", count=500)
    sink = GatedSink(keep=False)
    task = asyncio.ensure_future(Pipeline(source, [], sink, queue_size=1, metrics=path).run_async())
    while not source.ready.is_set():
        await asyncio.sleep(0.01)
    nc = await nats.connect(nats_url)
    for i in range(n):
        await nc.publish("stop", b"%d" % i)
    await nc.flush()
    await nc.close()
    while source.buffer.received < n:  # every message reached the client; the pipeline holds a few batches
        await asyncio.sleep(0.01)
    gate.set()
    stats = await asyncio.wait_for(task, 20)
    assert stats.losses is not None
    discarded = stats.losses["discarded"]
    assert (stats.records_out, discarded) == (500, n - 500) and stats.losses["lost"] == discarded
    rows = pq.read_table(path).to_pylist()
    assert sum(r["lost"] or 0 for r in rows) == discarded
    last = max(rows, key=lambda r: r["batch"])
    assert (last["step"], last["records"], last["lost"], last["batch"]) == (0, 0, discarded, stats.batches)


# --- a worker killed with SIGKILL -------------------------------------------------------------------


@pytest.mark.slow
def test_sigkilled_worker_leaves_readable_results(tmp_path: Path) -> None:
    import duckdb

    results = tmp_path / "worker.parquet"
    config = tmp_path / "worker.yaml"
    config.write_text(f"""
name: worker
source: {{type: generate, dataset: point, rate: 2000, batch_size: 100}}
operators:
  - serialize: {{format: msgpack}}
  - compress: {{codec: zstd, level: fastest}}
metrics: {{path: "{results}", flush_interval: 0.2s, row_group_rows: 1000000}}
""")
    proc = start_wirepipe("run", config, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if results.is_dir() and len(list_parts(results)) >= 3:
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        else:
            pytest.fail("the worker flushed no parts in time")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    table = pq.read_table(results)  # pyarrow reads the folder as one dataset
    assert table.num_rows >= 3 * 4
    batches = sorted(set(table.column("batch").to_pylist()))
    assert batches == list(range(len(batches)))  # flushed batches are all there, in order, no gap
    rows = duckdb.sql(f"select count(*) from read_parquet('{results}/*.parquet')").fetchall()[0][0]
    assert rows == table.num_rows
    res = load_results([results])
    assert res.stages.num_rows == table.num_rows
    out = wirepipe("report", results, "--quiet", "--csv", "-")
    assert out.returncode == 0, out.stderr
    assert "serialize" in out.stdout


def test_flushes_by_time_while_running(tmp_path: Path) -> None:
    """A slow source: parts appear during the run, not only at the end."""
    import asyncio

    path = tmp_path / "slow.parquet"
    rec = MetricsRecorder(path, flush_interval=0.05, row_group_rows=1_000_000, compact_parts=0)
    seen: list[int] = []

    async def main() -> None:
        pipe = Pipeline(GenerateSource("point", count=60, batch_size=10, rate=200), [Serialize("msgpack")],
                        NullSink(), metrics=rec)
        task = asyncio.create_task(pipe.run_async())
        while not task.done():
            await asyncio.sleep(0.03)
            if path.exists():
                seen.append(len(list_parts(path)))
        await task

    asyncio.run(main())
    assert max(seen) >= 2  # parts were written while the pipeline ran
    assert pq.read_table(path).num_rows == 6 * 3


def test_the_metrics_reference_documents_every_column() -> None:
    page = (Path(__file__).parent.parent / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    for columns in (STAGE_COLUMNS, LATENCY_COLUMNS, BENCH_COLUMNS):
        for name, (kind, meaning) in columns.items():
            assert f"| `{name}` | {kind} | {meaning.replace('|', chr(92) + '|')} |" in page, name
