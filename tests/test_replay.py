"""Replay of a capture: equal and in order, split across workers, on Beam, at the recorded pace."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tests.cli import invoke
from wirepipe.codecs.formats import restore_bytes
from wirepipe.connectors.capture_format import capture_table, plan_row_groups
from wirepipe.connectors.capture_sink import CaptureWriter
from wirepipe.connectors.pacing import LogicalClock, Pacer
from wirepipe.core.batch import Batch
from wirepipe.core.errors import WirepipeError
from wirepipe.datasets import get_dataset
from wirepipe.replay import Replay, local
from wirepipe.storage.parts import list_parts

HEADERS = {"Content-Type": "application/msgpack", "Content-Encoding": "zstd"}


def write_pipeline(path: Path, sink: dict[str, Any], *, metrics: str | None = None,
                   dead_letter: dict[str, Any] | None = None, operators: list[Any] | None = None) -> Path:
    doc: dict[str, Any] = {
        "name": "replay-test",
        "source": {"type": "nats", "subject": "ignored: replaced by the capture"},
        "operators": operators if operators is not None else [{"decompress": {"codec": "auto"}},
                                                               {"deserialize": {"format": "auto"}}],
        "sink": sink,
    }
    if metrics:
        doc["metrics"] = {"path": metrics}
    if dead_letter:
        doc["dead_letter"] = dead_letter
    path.write_bytes(orjson.dumps(doc))  # JSON is YAML
    return path


def read_jsonl(*paths: Path) -> list[Any]:
    return [restore_bytes(orjson.loads(line)) for p in paths for line in p.read_bytes().splitlines()]


def stage_counts(metrics_files: list[Path]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = collections.Counter()
    for f in metrics_files:
        for row in pq.read_table(f, columns=["stage", "operator", "records", "rejected"]).to_pylist():
            counts[(row["stage"], row["operator"])] += row["records"]
            counts[("rejected", row["stage"])] += row["rejected"]
    return {k: v for k, v in counts.items() if v}


def make_capture(folder: Path, records: list[dict], *, row_group_rows: int, corrupt_every: int = 0,
                 received_ns: list[int] | None = None) -> None:
    """A capture of msgpack|zstd records as a publishing pipeline leaves it; some payloads corrupt on demand."""
    compress = zstandard.ZstdCompressor(level=1).compress
    values = [compress(msgpack.packb(r)) for r in records]
    if corrupt_every:
        values = [b"\x28\xb5\x2f\xfd broken" if i % corrupt_every == corrupt_every - 1 else v
                  for i, v in enumerate(values)]
    meta = {"received_ns": received_ns} if received_ns is not None else {}
    writer = CaptureWriter(folder, row_group_rows=row_group_rows, fsync=False)
    writer.append(capture_table(Batch(values, subjects="blocks.test", headers=HEADERS, meta=meta), 0, writer.schema()))
    writer.close()


# --- equal and in order, locally and on workers ---------------------------------------------------


def test_capture_published_by_a_pipeline_replays_equal_and_in_order(tmp_path: Path) -> None:
    publish = tmp_path / "publish.yaml"
    publish.write_bytes(orjson.dumps({
        "name": "publish",
        "source": {"type": "generate", "dataset": "block", "count": 1200, "batch_size": 100},
        "operators": [{"serialize": {"format": "msgpack"}}, {"compress": {"codec": "zstd", "level": "fastest"}}],
        "sink": {"type": "capture", "dir": str(tmp_path / "cap"), "row_group_rows": 500},
    }))
    result = invoke("run", str(publish))
    assert result.returncode == 0, result.output
    pipeline = write_pipeline(tmp_path / "replay.yaml", {"type": "jsonl", "path": str(tmp_path / "out.jsonl")})
    result = invoke("replay", str(tmp_path / "cap"), "--pipeline", str(pipeline))
    assert result.returncode == 0, result.output
    assert "replayed 1200 records" in result.output
    assert read_jsonl(tmp_path / "out.jsonl") == get_dataset("block").sample(1200)


@pytest.mark.slow
def test_workers_split_row_groups_into_ordered_parts(tmp_path: Path) -> None:
    records = get_dataset("block").sample(900, seed=3)
    make_capture(tmp_path / "cap", records, row_group_rows=100)
    pipeline = write_pipeline(tmp_path / "replay.yaml", {"type": "jsonl", "path": str(tmp_path / "out.jsonl")},
                              metrics=str(tmp_path / "metrics.parquet"))
    result = local.run(Replay(str(pipeline), [str(tmp_path / "cap")], count=850), workers=2)
    parts = sorted(tmp_path.glob("out.w*.jsonl"))
    assert [p.name for p in parts] == ["out.w0.jsonl", "out.w1.jsonl"]  # named as a pool's workers' copies
    assert (result.workers, result.records_in, result.records_out) == (2, 850, 850)
    assert read_jsonl(*parts) == records[:850], "the parts in name order are the capture order"
    assert all(p.stat().st_size for p in parts), "both workers had a share"
    runs = list_parts(tmp_path / "metrics.parquet")  # one metrics folder, as a pool's workers share theirs
    counts = stage_counts(runs)
    assert counts[("decompress", "auto")] == counts[("write", "jsonl")] == 850
    workers = {json.loads(pq.read_schema(f).metadata[b"wirepipe.worker"])["index"] for f in runs}
    assert workers == {0, 1}


@pytest.mark.parametrize("workers", [1, 2])
def test_worker_in_a_path_is_the_worker_index_as_in_a_run(tmp_path: Path, workers: int) -> None:
    records = get_dataset("block").sample(200, seed=3)
    make_capture(tmp_path / "cap", records, row_group_rows=100)
    pipeline = write_pipeline(tmp_path / "replay.yaml", {"type": "jsonl", "path": str(tmp_path / "out-{worker}.jsonl")})
    local.run(Replay(str(pipeline), [str(tmp_path / "cap")]), workers=workers)
    parts = sorted(tmp_path.glob("out-*.jsonl"))
    assert [p.name for p in parts] == [f"out-{i}.jsonl" for i in range(workers)]
    assert read_jsonl(*parts) == records


def test_paced_workers_start_together_and_keep_the_capture_order(tmp_path: Path) -> None:
    """Three worker processes wait for one common start (each reports ready, then gets the start on its stdin)
    and release their shares on one schedule."""
    times = arrival_times(600)
    records = [{"i": i} for i in range(600)]
    make_capture(tmp_path / "cap", records, row_group_rows=100, received_ns=times)
    pipeline = write_pipeline(tmp_path / "replay.yaml", {"type": "jsonl", "path": str(tmp_path / "out.jsonl")})
    result = local.run(Replay(str(pipeline), [str(tmp_path / "cap")], pace="original", speed=20), workers=3)
    parts = sorted(tmp_path.glob("out.w*.jsonl"))
    assert [p.name for p in parts] == ["out.w0.jsonl", "out.w1.jsonl", "out.w2.jsonl"]
    assert (result.workers, result.records_out) == (3, 600)
    assert read_jsonl(*parts) == records


def test_a_failing_worker_ends_the_replay_with_its_error(tmp_path: Path) -> None:
    records = get_dataset("block").sample(300, seed=3)
    make_capture(tmp_path / "cap", records, row_group_rows=100)
    (tmp_path / "taken").write_text("a file where the sink wants a folder")
    pipeline = write_pipeline(tmp_path / "replay.yaml", {"type": "jsonl", "path": str(tmp_path / "taken" / "o.jsonl")})
    with pytest.raises(WirepipeError, match=r"^replay worker \d: sink jsonl: cannot write to .*taken"):
        local.run(Replay(str(pipeline), [str(tmp_path / "cap")]), workers=2)


def test_split_is_contiguous_and_balanced() -> None:
    from wirepipe.connectors.capture_format import RowGroup

    plan = [RowGroup("f", i, rows, sum([100, 10, 10, 100, 50, 30][:i])) for i, rows in enumerate([100, 10, 10, 100, 50, 30])]
    shares = local.split(plan, 3)
    assert [g for s in shares for g in s] == plan
    assert [sum(g.rows for g in s) for s in shares] == [100, 120, 80]
    assert len(local.split(plan[:2], 5)) == 2
    assert local.limit(plan, 115)[-1].rows == 5


# --- local and Beam give the same results -------------------------------------------------------


@pytest.fixture(scope="module")
def both_runners(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One capture (with corrupt records), replayed once locally and once on Beam's FnApiRunner."""
    root = tmp_path_factory.mktemp("runners")
    make_capture(root / "cap", get_dataset("block").sample(2400, seed=7), row_group_rows=400, corrupt_every=97)
    local_pipeline = write_pipeline(root / "local.yaml", {"type": "parquet", "path": str(root / "local" / "out.parquet")},
                                    metrics=str(root / "local" / "metrics.parquet"),
                                    dead_letter={"type": "parquet", "path": str(root / "local" / "dead.parquet")})
    # --count 2300 ends inside a row group (of 400): both runners cut it at the same record.
    result = invoke("replay", str(root / "cap"), "-p", str(local_pipeline), "--batch-size", "300",
                    "--count", "2300")
    assert result.returncode == 0, result.output
    summaries = {"local": result.stderr}
    result = invoke("replay", str(root / "cap"), "-p", str(local_pipeline), "--runner", "beam",
                    "--count", "2300", "--output", str(root / "beam"),
                    "--beam-option", "direct_num_workers=1")
    assert result.returncode == 0, result.output
    assert "beam FnApiRunner" in result.output
    summaries["beam"] = result.stderr
    return {"root": root, "local": root / "local", "beam": root / "beam", "output": Path(result.output),
            "summaries": summaries}  # type: ignore[dict-item]


def read_parts(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted(folder.glob("part-*.parquet"))])


@pytest.mark.slow
def test_local_and_beam_results_are_identical(both_runners: dict[str, Path]) -> None:
    local_out = pq.read_table(both_runners["local"] / "out.parquet")
    beam_out = read_parts(both_runners["beam"] / "results")
    assert local_out.num_rows == 2300 - 2300 // 97
    assert beam_out.to_pylist() == local_out.to_pylist()


@pytest.mark.slow
def test_local_and_beam_count_the_same_records_per_stage(both_runners: dict[str, Path]) -> None:
    local_counts = stage_counts([both_runners["local"] / "metrics.parquet"])
    beam_counts = stage_counts(sorted((both_runners["beam"] / "metrics").glob("*.parquet")))
    assert local_counts == beam_counts
    assert local_counts[("read", "capture")] == 2300
    assert local_counts[("rejected", "decompress")] == 2300 // 97


@pytest.mark.slow
def test_local_and_beam_dead_letter_the_same_records(both_runners: dict[str, Path]) -> None:
    local_dead = pq.read_table(both_runners["local"] / "dead.parquet").to_pylist()
    beam_dead = read_parts(both_runners["beam"] / "dead_letter").to_pylist()
    assert beam_dead == local_dead
    assert [r["seq"] for r in local_dead] == list(range(96, 2300, 97))


@pytest.mark.slow
def test_local_and_beam_name_the_rejections_by_reason_and_where_they_went(both_runners: dict[str, Any]) -> None:
    lines = {name: [line for line in text.splitlines() if line.startswith("  rejected")]
             for name, text in both_runners["summaries"].items()}
    reason = [line for line in lines["local"] if line.startswith("  rejected: ")]
    assert len(reason) == 1 and reason[0].startswith(f"  rejected: {2300 // 97} × decompress(auto): "), lines
    assert [line.split(" (first:")[0] for line in lines["beam"] if line.startswith("  rejected: ")] == \
        [reason[0].split(" (first:")[0]]  # one group, counted alike (Beam keeps no example)
    dead = {name: [line for line in text.splitlines() if line.startswith("  dead letters: ")]
            for name, text in both_runners["summaries"].items()}
    assert len(dead["local"]) == 1 and dead["local"][0].startswith(
        f"  dead letters: parquet {both_runners['local']}/dead.parquet (")
    assert dead["beam"] == [f"  dead letters: {both_runners['beam']}/dead_letter/ (dead-letter envelopes)"]


@pytest.mark.slow
def test_rejected_records_are_kept_without_a_dead_letter_on_both_runners(tmp_path: Path) -> None:
    """No `dead_letter` in the pipeline: the local run writes its default file beside the output, Beam the
    replay's dead_letter/ folder; each summary names it."""
    make_capture(tmp_path / "cap", get_dataset("point").sample(300, seed=3), row_group_rows=100, corrupt_every=50)
    pipeline = write_pipeline(tmp_path / "p.yaml", {"type": "jsonl", "path": str(tmp_path / "out.jsonl")})
    local_run = invoke("replay", str(tmp_path / "cap"), "-p", str(pipeline))
    assert local_run.returncode == 0, local_run.output
    dead = tmp_path / "out.replay.dead.jsonl"  # a replay's own: never a live run's out.dead.jsonl
    assert [orjson.loads(line)["seq"] for line in dead.read_bytes().splitlines()] == list(range(49, 300, 50))
    assert f"  dead letters: {dead} (6 appended as JSONL dead-letter envelopes" in local_run.stderr
    beam_run = invoke("replay", str(tmp_path / "cap"), "-p", str(pipeline), "--runner", "beam",
                      "--output", str(tmp_path / "beam"), "--beam-option", "direct_num_workers=1")
    assert beam_run.returncode == 0, beam_run.output
    assert [r["seq"] for r in read_parts(tmp_path / "beam" / "dead_letter").to_pylist()] == list(range(49, 300, 50))
    assert f"  dead letters: {tmp_path / 'beam'}/dead_letter/ (dead-letter envelopes)" in beam_run.stderr


@pytest.mark.slow
def test_beam_metrics_carry_the_run_metadata(both_runners: dict[str, Path]) -> None:
    files = sorted((both_runners["beam"] / "metrics").glob("*.parquet"))
    meta = pq.read_schema(files[0]).metadata
    assert meta[b"wirepipe.pipeline"] == b"replay-test"


@pytest.mark.slow
def test_beam_refuses_an_output_folder_that_holds_results(both_runners: dict[str, Path]) -> None:
    pipeline = both_runners["root"] / "local.yaml"
    result = invoke("replay", str(both_runners["root"] / "cap"), "-p", str(pipeline),
                    "--runner", "beam", "--output", str(both_runners["beam"]))
    assert result.returncode == 1
    assert "already holds a replay's output" in result.output


@pytest.mark.slow
def test_beam_import_logs_nothing_to_the_root_logger() -> None:
    code = ("import logging; from wirepipe.replay.beam import import_beam; import_beam(); "
            "print(len(logging.getLogger().handlers))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "0", "no handler installed on the root logger"
    assert "apitools" not in done.stderr and done.stderr.strip() == ""


# --- pacing -------------------------------------------------------------------------------------------


def arrival_times(n: int) -> list[int]:
    """Irregular recorded arrivals over a few seconds, with one long pause and one clock step back."""
    import random

    rng = random.Random(5)
    t, out = 1_700_000_000_000_000_000, []
    for i in range(n):
        t += rng.randrange(0, 4_000_000)  # 0-4 ms apart
        if i == n // 2:
            t += 1_500_000_000  # a 1.5 s pause
        out.append(t - (3_000_000 if i == n // 3 else 0))  # one record stamped 3 ms early
    return out


class RecordingPacer(Pacer):
    """A pacer that notes when (on its clock) each record was released."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sizes: list[int] = []
        self.released: list[float] = []
        self.runs = 0

    def schedule(self, timestamps: Any) -> list[tuple[int, int, float]]:
        runs = super().schedule(timestamps)
        self.sizes += [stop - start for start, stop, _ in runs]
        return runs

    async def wait(self, due: float, stop: Any) -> bool:
        ok = await super().wait(due, stop)
        self.released += [self.clock.now()] * self.sizes[self.runs]
        self.runs += 1
        return ok


@pytest.mark.parametrize("max_gap", [None, 0.1])
def test_original_pace_at_speed_10_keeps_order_and_time_on_a_logical_clock(tmp_path: Path, max_gap: float | None) -> None:
    n = 2000
    times = arrival_times(n)
    records = [{"i": i} for i in range(n)]
    make_capture(tmp_path / "cap", records, row_group_rows=256, received_ns=times)
    pipeline = write_pipeline(tmp_path / "replay.yaml", {"type": "jsonl", "path": str(tmp_path / "out.jsonl")})
    clock = LogicalClock()
    replay = Replay(str(pipeline), [str(tmp_path / "cap")], pace="original", speed=10, max_gap=max_gap)
    pipe = local.build(replay)
    pipe.source.pacer = pacer = RecordingPacer(speed=10, max_gap=max_gap, clock=clock)
    stats = pipe.run()

    assert stats.records_out == n
    assert read_jsonl(tmp_path / "out.jsonl") == records, "capture order"
    # Expected schedule: recorded gaps (never negative, at most max_gap) divided by the speed.
    due, virtual = [], 0
    for prev, t in zip([times[0], *times], times, strict=False):
        gap = max(0, t - prev)
        virtual += gap if max_gap is None else min(gap, int(max_gap * 1e9))
        due.append(virtual / 10 / 1e9)
    assert len(pacer.released) == n
    assert all(abs(r - d) <= pacer.tick for r, d in zip(pacer.released, due, strict=True)), "within one tick"
    assert pacer.released == sorted(pacer.released)
    span = (times[-1] - times[0]) / 1e9  # ~5.5 s recorded
    shortened = 0 if max_gap is None else 1.5 - max_gap
    assert clock.now() == pytest.approx((span - shortened) / 10, abs=0.001)
    assert clock.waits < n / 2, "records due together are released together"


def test_pacer_schedule_groups_by_tick_and_resumes() -> None:
    ms = 1_000_000
    pacer = Pacer(speed=2.0, tick=0.002)
    runs = pacer.schedule(pa.array([0, 1 * ms, 2 * ms, 10 * ms, None, 11 * ms], pa.int64()))
    # at speed 2: due 0, .5, 1, 5, 5, 5.5 ms
    assert runs == [(0, 3, 0.0), (3, 6, 0.005)]
    resumed = Pacer(speed=2.0, tick=0.002, last_ns=11 * ms, virtual_ns=pacer.virtual_ns)
    assert resumed.schedule(pa.array([15 * ms], pa.int64())) == pacer.schedule(pa.array([15 * ms], pa.int64()))


# --- the command line ---------------------------------------------------------------------------------


def test_cli_errors_are_clear(tmp_path: Path) -> None:
    make_capture(tmp_path / "cap", [{"i": 1}], row_group_rows=10)
    pipeline = write_pipeline(tmp_path / "p.yaml", {"type": "jsonl", "path": "-"})
    cases = [
        (["--pace", "slow"], 2, "--pace 'slow': allowed max, original"),
        (["--runner", "beam", "--workers", "2"], 2, "--workers is for the local runner"),
        (["--workers", "2"], 2, "cannot be shared by several workers"),
        (["--max-gap", "soon"], 2, "--max-gap"),
    ]
    for extra, code, message in cases:
        result = invoke("replay", str(tmp_path / "cap"), "-p", str(pipeline), *extra)
        assert result.returncode == code, (extra, result.output)
        assert message in result.output, (extra, result.output)
    result = invoke("replay", str(tmp_path / "nope"), "-p", str(pipeline))
    assert result.returncode == 2 and "no such file or folder" in result.output  # a usage error (exit_codes)
    result = invoke("replay", str(tmp_path / "cap"), "-p", str(pipeline), "--set", "sink.type=nope")
    assert result.returncode == 2 and "sink: unknown type 'nope'" in result.output


def test_workers_start_their_pacing_where_the_previous_share_ends(tmp_path: Path) -> None:
    times = arrival_times(1000)
    make_capture(tmp_path / "cap", [{"i": i} for i in range(1000)], row_group_rows=100, received_ns=times)
    replay = Replay("unused.yaml", [str(tmp_path / "cap")], pace="original", speed=3, max_gap=0.2)
    shares = local.split(plan_row_groups(tmp_path / "cap"), 3)
    states = local._pacing_states(replay, shares)
    one = Pacer(speed=3, max_gap=0.2)
    for share, state in zip(shares, states, strict=True):
        assert state == (one.last_ns, one.virtual_ns)
        one.advance(pa.array(times[share[0].position:share[-1].position + share[-1].rows], pa.int64()))
    resumed = Pacer(speed=3, max_gap=0.2, last_ns=states[2][0], virtual_ns=states[2][1])
    whole = Pacer(speed=3, max_gap=0.2)
    start = shares[2][0].position
    whole.advance(pa.array(times[:start], pa.int64()))
    assert resumed.schedule(pa.array(times[start:], pa.int64())) == whole.schedule(pa.array(times[start:], pa.int64()))


def test_plan_reads_footers_only(tmp_path: Path) -> None:
    make_capture(tmp_path / "cap", [{"i": i} for i in range(30)], row_group_rows=8)
    plan = plan_row_groups(tmp_path / "cap")
    assert [(g.index, g.rows, g.position) for g in plan] == [(0, 8, 0), (1, 8, 8), (2, 8, 16), (3, 6, 24)]
