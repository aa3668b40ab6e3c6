"""The capacity model (``wirepipe plan``): its arithmetic, and the command on measured and bench costs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.cli import invoke, wirepipe
from wirepipe.core.units import parse_rate
from wirepipe.datasets import get_dataset
from wirepipe.schema.fingerprint import schema_fingerprint
from wirepipe.study.plan.calibrate import Calibration, PoolRun, _Mark, calibration_records, steady_window
from wirepipe.study.plan.capacity import (
    ERROR_BAND,
    MSG_ID_EXAMPLE,
    SERVER_US,
    STORE_OVERHEAD,
    Costs,
    Deployment,
    measure_costs,
    plan,
    predict_rate,
    publish_header_bytes,
)
from wirepipe.wire.headers import STAMP_SIZE, Header, entry_size, header_size


def test_rates_parse() -> None:
    assert parse_rate("2M/s") == 2e6 and parse_rate("500k") == 5e5 and parse_rate(1200) == 1200.0
    with pytest.raises(ValueError, match=r"is not a rate: use e\.g\. 2M/s"):
        parse_rate("fast")


def test_plan_turns_costs_into_cores_wire_storage_and_the_first_limit() -> None:
    costs = Costs("x", publish_us=10.0, consume_us=20.0, sink_us=5.0, wire_bytes=870.0)
    dep = Deployment(rate=2e6, replicas=3, retention_s=86400, nodes=3, cores_per_node=32, link_bps=100e9,
                     disk_bytes=100e12, utilization=0.5)
    p = plan(costs, dep)
    assert p.publish_workers == math.ceil(2e6 * 10 / 1e6 / 0.5) == 40
    assert p.consume_workers == math.ceil(2e6 * 25 / 1e6 / 0.5) == 100
    message = 870 + costs.header_bytes
    assert p.wire_in_bps == 2e6 * message
    assert p.replication_bps == 2 * p.wire_in_bps
    assert p.store_per_hour == pytest.approx(2e6 * (message + STORE_OVERHEAD) * 3 * 3600)
    assert p.store_retention == pytest.approx(p.store_per_hour * 24)
    assert p.server_cores == pytest.approx(2e6 * SERVER_US * 4 / 1e6)
    used = {n.resource: n.used for n in p.needs}
    assert used["cores"] == pytest.approx((140 + p.server_cores / 0.5) / 96)
    assert p.first_to_run_out.resource == "cores"  # 204 of 96 cores, before links (32 of 100 Gbit/s per node) and disks
    assert "runs out first: cores" in p.lines()[-1] and "does not fit" in p.lines()[-1]
    fits = plan(costs, Deployment(rate=1e4, retention_s=86400, nodes=3, cores_per_node=32))
    assert fits.first_to_run_out.used < 1 and "the plan fits" in fits.lines()[-1]


def test_the_header_bytes_are_those_the_chain_and_the_sink_put_on_the_wire() -> None:
    """A typed chain's records carry Wirepipe-Schema besides Content-Type and Content-Encoding, a dictionary's
    Wirepipe-Dictionary; the JetStream sink adds Wirepipe-Sent-At and Nats-Msg-Id, the core NATS sink its stamps."""
    own = publish_header_bytes(None, "jetstream")
    assert own == header_size({Header.SENT_AT: "1" * 19, Header.MSG_ID: MSG_ID_EXAMPLE}) == 118
    msgpack = measure_costs("point", "msgpack|zstd:1", records=200, rounds=1)
    assert msgpack.header_bytes == own + len("Content-Type: application/msgpack\r\nContent-Encoding: zstd\r\n")
    avro = measure_costs("point", "avro|zstd:1", records=200, rounds=1)  # positional: written with the dataset's schema
    schema = entry_size(Header.SCHEMA, len(schema_fingerprint(get_dataset("point").schema)))
    assert avro.header_bytes == msgpack.header_bytes + len("avro") - len("msgpack") + schema == 209
    core = measure_costs("point", "msgpack|zstd:1", transport="nats", records=200, rounds=1)
    assert core.header_bytes == msgpack.header_bytes - entry_size(Header.MSG_ID, len(MSG_ID_EXAMPLE)) + STAMP_SIZE
    assert plan(avro, Deployment(rate=1e3)).wire_in_bps == pytest.approx(1e3 * (avro.wire_bytes + avro.header_bytes))


def test_predicted_rate_is_capped_by_workers_then_by_cores() -> None:
    costs = Costs("x", publish_us=0, consume_us=80.0, sink_us=20.0, wire_bytes=1)
    assert predict_rate(costs, 1, cores=8) == pytest.approx(10_000)  # one process, one core
    assert predict_rate(costs, 2, cores=8) == pytest.approx(20_000)
    # two workers on two cores share them with the nats-server
    assert predict_rate(costs, 2, cores=2) == pytest.approx(2e6 / (100 + 2 * SERVER_US))


def test_calibrated_costs_predict_from_what_the_workers_and_the_server_spent() -> None:
    """Calibrated on 4 cores: one worker alone spent 80 us of CPU per record and went 10k records/s (it waited for the
    server a fifth of the time); a worker per core spent 100 us each and the four went 30k records/s."""
    one = PoolRun(workers=1, records=30_000, seconds=3.0, worker_us=80.0, server_us=15.0, supervisor_us=5.0,
                  share=0.8, cores=4)
    full = PoolRun(workers=4, records=60_000, seconds=2.0, worker_us=100.0, server_us=12.0, supervisor_us=2.0,
                   share=0.75, cores=4)
    costs = Costs("x", publish_us=0, consume_us=20.0, sink_us=10.0, wire_bytes=1, calibrated=Calibration(one, full))
    assert costs.consume_total_us == 100.0  # what a worker spent with every core busy, not the in-process 30
    assert costs.server_us == 6.0  # per message per replica: the R1 stream's store and delivery, halved
    assert predict_rate(costs, 1, cores=4) == pytest.approx(10_000)  # as fast as the calibration's one worker
    assert predict_rate(costs, 4, cores=4) == pytest.approx(30_000)  # as fast as its full pool
    assert predict_rate(costs, 2, cores=4) == pytest.approx(10_000 + 20_000 / 3)  # in proportion between
    assert predict_rate(costs, 8, cores=4) == pytest.approx(30_000)  # no more than a worker per core
    assert predict_rate(costs, 8, cores=8) == pytest.approx(60_000)  # as fast per core on a larger machine
    p = plan(costs, Deployment(rate=1e5, replicas=3))
    assert p.consume_workers == math.ceil(1e5 * 100 / 1e6 / 0.7) and p.server_cores == pytest.approx(1e5 * 6 * 4 / 1e6)
    lines = "\n".join(costs.calibration_lines())
    assert ("ran 3.0s as 1 worker and 2.0s as 4 on a local nats-server: a worker spent 80.0 us of CPU per record alone, "
            "100.0 with every core busy (in-process stages and sink 30.0), nats-server 12.0 us") in lines
    assert f"predicted on this machine (4 cores): 1 worker ~10k/s, 4 workers ~30k/s (records/s, +-{ERROR_BAND:.0%})" in lines
    assert "busy meanwhile" not in lines
    # one core: the worker shares it with the server and the supervisor; the rest of the machine kept half of it
    alone = Costs("x", 0, 20.0, 10.0, 1, calibrated=Calibration(PoolRun(1, 30_000, 3.0, 80.0, 15.0, 5.0, share=0.8,
                                                                        others=0.5, cores=1)))
    assert predict_rate(alone, 1, cores=1) == pytest.approx(0.5e6 / (80 + 15 + 5))
    assert "kept up to 0.5 cores busy meanwhile" in "\n".join(alone.calibration_lines())
    uncalibrated = "\n".join(Costs("x", 0, 20.0, 10.0, 1).calibration_lines())
    assert "not calibrated" in uncalibrated


def test_a_pools_ceiling_is_what_the_cores_the_rest_of_the_machine_left_allow() -> None:
    """Two workers at 70 us of CPU a record, nats-server 9 and the supervisor 1 share two cores: 2 / 80 us; a
    worker alone is capped by its own core. What the rest of the machine keeps busy is not the pool's."""
    two = PoolRun(workers=2, records=48_000, seconds=2.0, worker_us=70.0, server_us=9.0, supervisor_us=1.0, share=0.9,
                  cores=2)
    assert two.ceiling == pytest.approx(25_000) and two.rate == 24_000
    loaded = PoolRun(2, 36_000, 2.0, 70.0, 9.0, 1.0, share=0.7, others=0.5, cores=2)
    assert loaded.ceiling == pytest.approx(1.5e6 / 80)
    assert two.rate_with(0.5) == pytest.approx(24_000 * 0.75)  # the same part of a ceiling a quarter lower
    one = PoolRun(1, 28_000, 2.0, 70.0, 9.0, 1.0, share=0.98, cores=2)
    assert one.ceiling == pytest.approx(1e6 / 70)  # its own core, the server on the other
    assert one.rate_with(1.5) == pytest.approx(14_000 * (0.5e6 / 80) / (1e6 / 70))  # half a core left for all three
    assert PoolRun(2, 100, 1.0, 70.0, None, 1.0, share=1.0, cores=2).ceiling == pytest.approx(2e6 / 71)


def test_calibrated_predictions_at_another_load_scale_with_the_ceiling() -> None:
    one = PoolRun(1, 28_000, 2.0, 70.0, 9.0, 1.0, share=0.98, cores=2)
    full = PoolRun(2, 48_000, 2.0, 70.0, 9.0, 1.0, share=0.9, cores=2)
    costs = Costs("x", 0, 20.0, 10.0, 1, calibrated=Calibration(one, full))
    assert predict_rate(costs, 1, cores=2) == 14_000 and predict_rate(costs, 2, cores=2) == 24_000
    assert predict_rate(costs, 1, cores=2, others=0.0) == 14_000  # the load the calibration had
    assert predict_rate(costs, 2, cores=2, others=0.5) == pytest.approx(18_000)
    assert predict_rate(costs, 1, cores=2, others=1.5) == pytest.approx(one.rate_with(1.5))



def test_one_worker_runs_twice_and_a_machine_that_moves_by_itself_is_said_to() -> None:
    """The calibration's one worker runs before and after the full pool: the prediction is both runs as one window;
    where the second made more than +-20% of the first, the plan says this machine's pace moves by itself."""
    first = PoolRun(1, 30_000, 2.0, 70.0, 12.0, 1.0, share=0.98, cores=2)  # 15,000 records/s
    steady = PoolRun(1, 42_000, 3.0, 71.0, 12.5, 1.0, share=0.98, cores=2)  # 14,000 records/s
    full = PoolRun(2, 48_000, 2.0, 75.0, 10.0, 1.0, share=0.9, cores=2)
    costs = Costs("x", 0, 20.0, 10.0, 1, calibrated=Calibration(first, full, again=steady))
    alone = costs.calibrated.alone  # type: ignore[union-attr]
    assert (alone.records, alone.seconds, alone.rate) == (72_000, 5.0, 14_400)
    assert alone.worker_us == pytest.approx((70.0 * 30_000 + 71.0 * 42_000) / 72_000)
    assert alone.share == pytest.approx(0.98)
    assert predict_rate(costs, 1, cores=2) == pytest.approx(14_400)
    assert predict_rate(costs, 2, cores=2) == pytest.approx(24_000)  # the full pool's, as before
    # at another load, each run scaled by its own ceiling, then the two as one window
    assert predict_rate(costs, 1, cores=2, others=1.5) == pytest.approx(
        72_000 / (30_000 / first.rate_with(1.5) + 42_000 / steady.rate_with(1.5)))
    assert costs.calibrated.drift == pytest.approx(14_000 / 15_000)  # type: ignore[union-attr]
    lines = "\n".join(costs.calibration_lines())
    assert "ran 5.0s as 1 worker and 2.0s as 2" in lines and "moves by itself" not in lines
    slower = PoolRun(1, 30_000, 3.0, 98.0, 16.0, 1.0, share=0.98, cores=2)  # 10,000 records/s: 0.67 of the first
    moved = "\n".join(Costs("x", 0, 20.0, 10.0, 1, calibrated=Calibration(first, full, again=slower))
                       .calibration_lines())
    assert ("the same worker, run again seconds later, made 10k/s against 15k/s (0.67x, 70 then 98 us of CPU a "
            f"record): this machine's pace moves by itself by more than +-{ERROR_BAND:.0%}") in moved
    assert Calibration(first, full).drift is None and Calibration(first, full).alone is first

def _marks(*commits: tuple[tuple[int, int], ...]) -> list[_Mark]:
    """Marks of a pool: each a (records committed, records read) per worker, a second apart."""
    return [_Mark([(float(t), done, 0.0) for done, _ in workers], [read for _, read in workers], None, 0.0, float(t),
                  None, None) for t, workers in enumerate(commits)]


def test_the_steady_window_ends_at_the_last_commit_before_the_stream_ran_dry() -> None:
    """Two workers on 60,000 records, committing every 5,000 or so: w1 took the last messages (30,000 read by
    then, 32,000 in all); w0 wrote its last and waited for records that did not come, then for its flush interval;
    90% (54,000) was committed only after that. The window ends at the last mark where both read more later."""
    marks = _marks(((6000, 9000), (5000, 8000)), ((11000, 14000), (10000, 13000)), ((16000, 19000), (15000, 18000)),
                   ((21000, 24000), (20000, 23000)), ((26000, 27000), (20000, 23000)),
                   ((26000, 27000), (25000, 30000)), ((28000, 28000), (25000, 30000)),
                   ((28000, 28000), (32000, 32000)))
    first, last = steady_window(marks, [28000, 32000], 60_000)
    assert (first.committed, last.committed) == (21_000, 51_000)
    assert steady_window(marks, [28000, 32000], 60_000, window=(0.2, 0.6)) == (first, marks[3])  # up to 60%
    assert steady_window(marks[:2], [14000, 13000], 60_000) is None  # nothing steady past 20%


def test_a_window_of_a_few_seconds_goes_past_its_share_of_the_stream_where_the_stream_holds_more() -> None:
    """One worker committing 5,000 records a second on a stream of 40,000, its window meant for 20,000 of them: 20%
    to 90% of those is 3 s; at least 5 s goes on into the rest of the stream; more than the stream holds ends at
    the last steady mark."""
    marks = _marks(*[((5000 * i, min(5000 * i + 500, 40_000)),) for i in range(1, 9)])
    assert steady_window(marks, [40_000], 20_000)[1].committed == 20_000  # type: ignore[index]
    first, last = steady_window(marks, [40_000], 20_000, seconds=5.0)  # type: ignore[misc]
    assert (first.committed, last.committed, last.at - first.at) == (5000, 30_000, 5.0)
    first, last = steady_window(marks, [40_000], 20_000, seconds=60.0)  # type: ignore[misc]
    assert last.committed == 35_000  # the commit at 40,000 came after the stream ran dry


def test_the_calibration_runs_for_a_few_seconds_whatever_a_record_costs() -> None:
    assert calibration_records(100.0) == pytest.approx(10_000 * 3 / 0.7, rel=0.01)
    assert calibration_records(10_000.0) == 3000  # at least enough for two reports in the window
    assert calibration_records(0.5) == 150_000  # not more than a stream of a few seconds holds


def test_wirepipe_plan_measures_the_chain_when_no_bench_is_given() -> None:
    res = wirepipe("plan", "--rate", "2M/s", "--dataset", "point", "--chain", "msgpack|zstd:fastest",
                   "--nodes", "3", "--cores-per-node", "16", "--no-calibrate")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "plan for 2M records/s of point msgpack|zstd:fastest over jetstream (R3, retention 7 days)" in out
    assert "measured in-process now" in out
    assert "consume side not calibrated" in out
    for needle in ("publishers:", "consumers:", "wire:", "JetStream storage:", "per hour", "per 7 days",
                   "runs out first:"):
        assert needle in out


@pytest.mark.slow
def test_wirepipe_plan_calibrates_the_consume_side_in_a_worker_process(tmp_path: Path) -> None:
    """Over JetStream the plan runs the consume pipeline in a worker process on a local nats-server and plans with
    what the worker spent (its CPU per record comes from its own reports), stating the band of its prediction.
    The chain is the fastest of a bench and positional (msgpack-array): its records are encoded and the
    calibration's workers decode them with the built-in dataset's schema, as the bench did (it once failed: no
    schema). One test for both: a calibration is seconds of both cores."""
    bench = wirepipe("bench", "--transport", "none", "--dataset", "point", "--format", "msgpack-array", "--codec",
                     "zstd", "--level", "fastest", "-k", "1", "-n", "200", "--out", str(tmp_path / "b"))
    assert bench.returncode == 0, bench.stderr
    res = wirepipe("plan", "--rate", "100k", "--bench", str(tmp_path / "b"), "--replicas", "1", "--nodes", "1",
                   "--cores-per-node", "2", "--sink", "parquet")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "of point msgpack-array|zstd:fastest over jetstream" in out, out
    assert "consume side calibrated in worker processes now" in out
    found = re.search(r"calibrated: the consume pipeline ran [\d.]+s as 1 worker(?: and [\d.]+s as \d+)? on a local "
                      r"nats-server: a worker spent ([\d.]+) us of CPU per record alone(?:, ([\d.]+) with every core "
                      r"busy)? \(in-process stages and sink [\d.]+\), nats-server ([\d.]+) us", out)
    assert found, out
    spent = float(found[2] or found[1])  # with every core busy, where the machine has more than one
    assert float(found[1]) > 0 and spent > 0 and float(found[3]) > 0
    predicted = re.search(r"predicted on this machine \((\d+) cores\): (.+) \(records/s, \+-20%\)", out)
    assert predicted, out
    rates = {int(w): parse_rate(r) for w, r in re.findall(r"(\d+) workers? ~([\d.]+[kM]?)/s", predicted[2])}
    assert sorted(rates) == sorted({1, int(predicted[1])}) and 0 < rates[1] <= max(rates.values())
    workers = int(re.search(r"consumers: +(\d+) worker processes", out)[1])
    assert workers == math.ceil(1e5 * spent / 1e6 / 0.7)  # planned with what a worker spent


@pytest.mark.slow
def test_wirepipe_plan_reads_bench_results_and_refuses_bad_flags(tmp_path: Path) -> None:
    bench = wirepipe("bench", "--transport", "none", "--dataset", "point", "--format", "msgpack", "--codec",
                     "zstd", "--level", "fastest", "-k", "1", "-n", "200", "--out", str(tmp_path / "b"))
    assert bench.returncode == 0, bench.stderr
    res = wirepipe("plan", "--rate", "500k", "--bench", str(tmp_path / "b"), "--dataset", "point",
                   "--transport", "nats")  # core NATS: nothing calibrated
    assert res.returncode == 0, res.stderr
    assert "point msgpack|zstd:fastest over nats" in res.stdout and "wirepipe bench results" in res.stdout
    assert "JetStream storage" not in res.stdout  # core NATS stores nothing
    bad = invoke("plan", "--rate", "lots")  # refused before it plans
    assert bad.returncode == 2 and "'lots' is not a rate" in bad.stderr
    bad = invoke("plan", "--rate", "1k", "--replicas", "3", "--nodes", "1")
    assert bad.returncode == 2 and "--replicas 3 needs at least 3 nodes" in bad.stderr


@pytest.mark.slow
def test_plan_takes_the_datasets_from_bench_results_ones_own_too(tmp_path: Path) -> None:
    """`plan --bench RESULTS` plans for each dataset the results hold (a built-in one and one's own from
    `bench --input`), and one's own dataset works with every option, --sink parquet included (its records are
    read again from the input file the results name)."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"ts": 1700000000 + i, "level": "info", "msg": f"request {i}"}) + "\n"
                              for i in range(300)))
    bench = wirepipe("bench", "--transport", "none", "--input", str(events), "--dataset", "point", "--format",
                     "msgpack,json", "--codec", "none,zstd", "--level", "fastest", "-k", "1", "-n", "200",
                     "--out", str(tmp_path / "b"))
    assert bench.returncode == 0, bench.stderr
    # --no-calibrate: the datasets are the point here (the calibration has its own test)
    both = wirepipe("plan", "--rate", "500k", "--bench", str(tmp_path / "b"), "--no-calibrate")
    assert both.returncode == 0, both.stderr
    heads = re.findall(r"^plan for 500k records/s of (\S+) (\S+) over jetstream", both.stdout, re.M)
    assert sorted(name for name, _ in heads) == ["events", "point"], both.stdout
    own = wirepipe("plan", "--rate", "500k", "--bench", str(tmp_path / "b"), "--dataset", "events",
                   "--chain", "json|zstd:fastest", "--transport", "nats", "--sink", "parquet", "--no-calibrate")
    assert own.returncode == 0, own.stderr
    assert "plan for 500k records/s of events json|zstd:fastest over nats" in own.stdout
    sink_us = float(re.search(r"sink ([\d.]+) us", own.stdout)[1])
    assert sink_us > 0 and "parquet sink measured in-process now" in own.stdout
    events.rename(tmp_path / "moved.jsonl")
    gone = wirepipe("plan", "--rate", "500k", "--bench", str(tmp_path / "b"), "--dataset", "events",
                    "--sink", "parquet", "--no-calibrate")
    assert gone.returncode == 2
    assert f"its input file {events} is not there any more" in gone.stderr
    builtin_only = wirepipe("plan", "--rate", "1k", "--dataset", "events")
    assert builtin_only.returncode == 2 and "--bench RESULTS of `wirepipe bench --input FILE`" in builtin_only.stderr
