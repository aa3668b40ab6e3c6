"""The study as a newcomer meets it: a plan with its cost first, Ctrl-C keeps what finished, a dead
server fails fast, honest winners (ties, byte-identical formats), per-combination figures."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.cli import start_wirepipe, wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.exit_codes import ExitCode
from wirepipe.study.bench.combos import QUICK, BenchPlan
from wirepipe.study.bench.command import make_plan
from wirepipe.study.bench.estimate import calibrate
from wirepipe.study.bench.measure import JOURNAL, load_data, rows_table, run_bench
from wirepipe.study.report import summarize
from wirepipe.study.report.recommend import Recommendation, _fastest_of_same_bytes
from wirepipe.study.report.statistics import median_interval


def _plan(out: Path, **kw: object) -> BenchPlan:
    base: dict[str, object] = {"dataset": None, "inputs": [], "format": None, "codec": None, "level": None,
                               "transport": "none", "iterations": None, "repetitions": None, "out": out,
                               "quick": False, "zstd_dict": None, "records_per_message": None, "seed": 0}
    return make_plan(**{**base, **kw})  # type: ignore[arg-type]


def test_quick_composes_with_input_dataset_and_other_flags(tmp_path: Path) -> None:
    src = tmp_path / "mine.jsonl"
    src.write_text("\n".join(json.dumps({"id": i}) for i in range(20)))
    mine = _plan(tmp_path, quick=True, inputs=[src])
    assert mine.inputs == [src] and mine.datasets == [] and mine.formats == QUICK["formats"]
    assert mine.iterations == QUICK["iterations"] and mine.scale == QUICK["scale"]
    both = _plan(tmp_path, quick=True, inputs=[src], dataset="transaction", codec="gzip", iterations=2)
    assert both.datasets == ["transaction"] and both.codecs == ["gzip"] and both.iterations == 2
    assert both.formats == QUICK["formats"] and both.levels == QUICK["levels"]


def test_the_plan_says_what_it_measures_and_its_calibration_ran(tmp_path: Path) -> None:
    """A file's sample is drawn at random from all of it (seeded, in random order), the plan says so with N,
    and the estimate comes from a calibration that took measurable time (not ``0.0s``)."""
    from wirepipe.study.bench.estimate import describe

    src = tmp_path / "events.jsonl"
    src.write_text("".join(json.dumps({"id": i, "user": f"u{i % 7}"}) + "\n" for i in range(2000)))
    plan = _plan(tmp_path, quick=True, inputs=[src])
    [data] = load_data(plan)
    ids = [r["id"] for r in data.records]
    assert len(set(ids)) == len(ids) == 1000 and data.total == 2000
    assert min(ids) < 100 and max(ids) >= 1900 and ids != sorted(ids)  # all of the file, in random order
    assert [r["id"] for r in load_data(plan)[0].records] == ids  # the seed draws the same sample
    assert [r["id"] for r in load_data(_plan(tmp_path, quick=True, inputs=[src], seed=1))[0].records] != ids
    estimate = calibrate(plan, [data], plan.combos())
    assert estimate.calibration_seconds > 0 and estimate.repetitions == {"events": data.repetitions}
    text = " ".join(describe(plan, [data], plan.combos(), estimate, 400).split())
    assert (f"events: 1,000 of the 2,000 records of events.jsonl, drawn at random (seed 0), cycled through the "
            f"N = {data.repetitions:,} repetitions of an iteration") in text and data.repetitions > 1000
    assert re.search(r"estimated duration: [\d.]+s \(from a [1-9]\d* ms calibration on this machine\)", text), text
    assert estimate.per_iteration == estimate.per_message == 0 and not estimate.transport  # in-process only
    # N smaller than the sample: the first N of the random sample, each measured once per iteration
    [few] = load_data(_plan(tmp_path, inputs=[src], repetitions=300))
    assert few.records == data.records[:300]
    assert few.sample == "300 of the 2,000 records of events.jsonl, drawn at random (seed 0), each once per " \
                         "iteration (N = 300)"
    # a small file is measured whole, in its order; with N smaller, N of its records drawn at random
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(400)))
    [whole] = load_data(_plan(tmp_path, inputs=[small], repetitions=500))
    assert [r["id"] for r in whole.records] == list(range(400))
    assert whole.sample == "all 400 records of small.jsonl, cycled through the N = 500 repetitions of an iteration"
    [part] = load_data(_plan(tmp_path, inputs=[small], repetitions=100))
    ids = [r["id"] for r in part.records]
    assert len(set(ids)) == 100 and max(ids) >= 300 and part.sample.startswith("100 of the 400 records of small")


@pytest.mark.slow
def test_the_transport_estimate_is_scaled_by_a_real_iteration(tmp_path: Path) -> None:
    """Over NATS the calibration runs real iterations (the probes) and fits a transport iteration's cost and
    a message's to them: each step's estimate is those for its N plus the codec work."""
    from wirepipe.study.bench.estimate import TRANSPORT_PER_ITERATION, TRANSPORT_PER_MESSAGE, describe

    plan = _plan(tmp_path, dataset="point", format="msgpack", codec="none,zstd", level="fastest",
                 transport="nats", repetitions=2000, iterations=2)
    datas = load_data(plan)
    combos = plan.combos()
    estimate = calibrate(plan, datas, combos)
    iteration, message = TRANSPORT_PER_ITERATION["nats"], TRANSPORT_PER_MESSAGE["nats"]
    assert iteration / 2 <= estimate.per_iteration <= iteration * 10 and message / 2 <= estimate.per_message <= \
        message * 10
    assert (estimate.per_iteration, estimate.per_message) != (iteration, message)  # the probes ran
    for c in combos:
        codec_work = estimate.transport[("point", c)] - estimate.per_iteration - 2000 * estimate.per_message
        assert 0 < codec_work < estimate.transport[("point", c)]
    text = " ".join(describe(plan, datas, combos, estimate, 400).split())
    assert "calibration on this machine, three iterations over nats included)" in text


@pytest.mark.slow
def test_progress_counts_estimated_seconds_from_the_start(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["point"], formats=["msgpack", "json"], codecs=["none", "zstd"], levels=["fastest"],
                     transport="none", iterations=2, repetitions=400, out=tmp_path)
    datas, combos = load_data(plan), plan.combos()
    estimate = calibrate(plan, datas, combos)
    assert estimate.seconds > 0 and set(estimate.codec) == {("point", c) for c in combos}
    # the estimate is N x the calibrated cost per record: twice the repetitions, twice the estimate
    double = BenchPlan(**{**plan.__dict__, "repetitions": 800})
    assert estimate.repetitions == {"point": 400}
    steps: list[tuple[str, float, float]] = []
    run_bench(plan, lambda d, done, total: steps.append((d, done, total)), datas=datas, estimate=estimate)
    assert steps[0] == ("warm-up", 0.0, estimate.seconds)  # the total is known before the warm-up
    assert {t for _, _, t in steps} == {estimate.seconds}
    dones = [d for _, d, _ in steps]
    assert dones == sorted(dones) and dones[-1] == pytest.approx(estimate.seconds)
    assert len(steps) == 1 + len(combos) * (plan.iterations + 1)  # warm-up steps count too
    lines = (tmp_path / JOURNAL).read_text().splitlines()
    assert len(lines) == len(combos) * (plan.iterations + 1)
    assert double.repetitions == 800


def test_a_long_plan_is_refused_without_yes_and_nothing_is_measured(tmp_path: Path) -> None:
    # block costs tens of µs per record per format: 500000 repetitions x 100 iterations is hours on any machine
    out = wirepipe("bench", "--dataset", "block", "--format", "msgpack,json", "--codec", "none", "--transport", "none",
                   "--repetitions", "500000", "--iterations", "100", "--out", str(tmp_path), columns=100, timeout=300)
    assert out.returncode == ExitCode.CONFIG, out.stderr
    assert "estimated duration:" in out.stdout and "plan: 2 combinations" in out.stdout
    assert "--quick" in out.stderr and "--yes" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "bench.parquet").exists() and not (tmp_path / JOURNAL).exists()


@pytest.mark.slow
def test_an_unreachable_server_fails_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    # connect_timeout 1 s, not the default 10 s: the same wait and message, sooner
    out = wirepipe("bench", "--quick", "--url", f"nats://127.0.0.1:{port}", "--set", "connect_timeout=1s",
                   "--out", str(tmp_path), timeout=60, columns=100)
    assert out.returncode == ExitCode.RUNTIME
    lines = out.stderr.strip().splitlines()  # what it waits for, at once; then why it gave up
    assert len(lines) == 2 and lines[0] == f"waiting for NATS at nats://127.0.0.1:{port} (connection refused), " \
        "up to 1s (connect_timeout)", lines
    assert lines[1].startswith(f"error: cannot connect to NATS at nats://127.0.0.1:{port} within 1s")
    assert "wirepipe server" in lines[1]
    assert "plan:" not in out.stdout and not (tmp_path / "bench.parquet").exists()


@pytest.mark.slow
def test_ctrl_c_keeps_what_finished_and_exits_130(tmp_path: Path) -> None:
    k = 4
    proc = start_wirepipe("bench", "--dataset", "point", "--format", "msgpack,json", "--codec", "none,zstd",
                          "--level", "fastest", "--repetitions", "2000", "--iterations", str(k), "--out", tmp_path,
                          columns=100)
    journal = tmp_path / JOURNAL

    def transported() -> list[str]:
        lines = journal.read_text().splitlines() if journal.exists() else []
        return [json.loads(x)["combination"] for x in lines if '"transport"' in x]

    deadline = time.monotonic() + 240
    while len(transported()) < k + 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the bench ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, stderr
    assert "interrupted" in stderr and "interrupted: kept" in stdout
    done = transported()
    finished = {c for c in done if done.count(c) == k}
    assert finished  # at least the first combination crossed the wire K times
    table = pq.read_table(tmp_path / "bench.parquet")
    publish = table.filter(pc.equal(table.column("stage"), "publish"))
    assert set(publish.column("chain").to_pylist()) == finished  # every kept combination, over NATS, whole
    meta = pq.read_schema(tmp_path / "bench.parquet").metadata
    assert json.loads(meta[b"wirepipe.bench.interrupted"]) is True
    assert len(json.loads(meta[b"wirepipe.bench.not_measured"])) == 4 - len(finished)
    assert "**Interrupted**" in (tmp_path / "bench.md").read_text()
    assert (tmp_path / "report.html").stat().st_size > 0 and (tmp_path / "report.md").exists()


@pytest.mark.slow
def test_a_failed_combination_exits_4_writes_the_rest_and_is_never_recommended(tmp_path: Path) -> None:
    """Uncompressed blocks (~11 kB) are refused by a server with an 8 kB max_payload, after their in-process
    figures (faster: no compression) were measured; no pick, file or later report names them."""
    with EmbeddedServer(max_payload=8192) as server:
        out = wirepipe("bench", "--dataset", "block", "--format", "msgpack,json", "--codec", "none,zstd", "--level",
                       "fastest", "--repetitions", "100", "--iterations", "2", "--url", server.url, "--out",
                       str(tmp_path), columns=100, timeout=300)
    assert out.returncode == ExitCode.BENCH_FAILURES, out.stderr
    assert "2 combination(s) failed" in out.stderr
    assert "### Failed combinations" in (tmp_path / "bench.md").read_text()
    assert set(pq.read_table(tmp_path / "bench.parquet").column("chain").to_pylist()) == {
        "msgpack|zstd:fastest", "json|zstd:fastest"}
    kinds = ("fastest end to end", "smallest on the wire", "best for the link")
    # the terminal, bench.md, report.md and `wirepipe report` on the results: only configurations that passed
    terminal = re.findall(rf"^({'|'.join(kinds)}): (\S+)$", out.stdout, re.M)
    bench_md = re.findall(rf"^\*\*({'|'.join(kinds)})\*\*: `([^`]+)`", (tmp_path / "bench.md").read_text(), re.M)
    again = wirepipe("report", str(tmp_path), "--quiet", "--markdown", "-")
    assert again.returncode == 0, again.stderr
    for markdown in ((tmp_path / "report.md").read_text(), again.stdout):
        rows = re.findall(rf"^\| block \| ({'|'.join(kinds)}) \| (.+?) \| ", markdown, re.M)
        assert [(k, c.replace("\\|", "|")) for k, c in rows] == terminal, markdown[:1500]
        assert "- block: msgpack: nats: the publisher refused" in markdown
    assert [k for k, _ in terminal] == list(kinds) and bench_md == terminal
    assert {c for _, c in terminal} <= {"msgpack|zstd:fastest", "json|zstd:fastest"}, terminal
    # nor does `wirepipe plan --bench` plan with one
    planned = wirepipe("plan", "--rate", "10k", "--bench", str(tmp_path), "--no-calibrate")
    assert planned.returncode == 0, planned.stderr
    assert re.search(r"^plan for 10k records/s of block (msgpack|json)\|zstd:fastest ", planned.stdout, re.M)
    refused = wirepipe("plan", "--rate", "10k", "--bench", str(tmp_path), "--chain", "msgpack", "--no-calibrate")
    assert refused.returncode == 1 and "block msgpack failed in the bench, so it is not planned with: nats: the " \
        "publisher refused" in refused.stderr, refused.stderr


# --- honest winners ----------------------------------------------------------------------------------


def test_median_interval() -> None:
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # few values: the range
    values = [float(v) for v in range(1, 21)]
    mid, lo, hi = median_interval(values)
    assert mid == 10.5 and (lo, hi) == (6.0, 15.0)  # ranks 6 and 15 of 20 (binomial, >= 95%)


@pytest.mark.slow
def test_ties_and_byte_identical_formats_in_a_real_bench(tmp_path: Path) -> None:
    plan = BenchPlan(datasets=["transaction"], formats=["json", "orjson", "msgpack"], codecs=["none", "zstd"],
                     levels=["fastest"], transport="none", iterations=3, repetitions=300, out=tmp_path)
    run = run_bench(plan)
    table = rows_table(run)
    ser = table.filter(pc.equal(table.column("stage"), "serialize"))
    digest = dict(zip(ser.column("chain").to_pylist(), ser.column("payload_digest").to_pylist(), strict=True))
    assert digest["json"] == digest["orjson"] != digest["msgpack"]  # json and orjson write the same bytes
    report = summarize(table)
    groups = {g.config: g for g in report.groups}
    json_zstd, orjson_zstd = groups["json|zstd:fastest"], groups["orjson|zstd:fastest"]
    assert json_zstd.same_bytes_key() == orjson_zstd.same_bytes_key() is not None
    slower, faster = sorted([json_zstd, orjson_zstd], key=lambda g: g.path_median)[::-1]
    # a pick that names the slower of two byte-identical configurations is turned into the faster one
    fixed = _fastest_of_same_bytes(Recommendation("transaction", "smallest", slower, "x"), list(groups.values()))
    assert fixed.group is faster and fixed.instead_of is slower and "same bytes" in fixed.sureness
    for r in report.recommendations:
        key = r.group.same_bytes_key()
        rivals = [g for g in report.groups if key is not None and g.same_bytes_key() == key]
        assert all(r.group.path_median <= g.path_median for g in rivals)
        assert all(g.path_interval[0] <= r.group.path_interval[1] for g in r.tied)  # a tie overlaps


def test_a_tie_is_named_when_intervals_overlap() -> None:
    import pyarrow as pa

    rows = []
    for label, times in (("a", [10, 11, 12]), ("b", [11, 12, 13]), ("c", [30, 31, 32])):
        for it, us in enumerate(times):
            for step, stage in enumerate(("serialize", "deserialize")):
                rows.append({"run_id": "r", "pipeline": "bench", "label": f"point: {label}", "dataset": "point",
                             "batch": it, "step": step, "stage": stage, "operator": "msgpack", "params": "{}",
                             "records": 1000, "rejected": 0, "bytes_in": 8000, "bytes_out": 7000,
                             "start_ns": 0, "end_ns": us * 500_000})
    report = summarize(pa.Table.from_pylist(rows))
    fastest = next(r for r in report.recommendations if r.kind == "fastest")
    assert fastest.group.config == "a" and [g.config for g in fastest.tied] == ["b"]
    assert fastest.sureness == "tied within noise: a, b"
    # each configuration's own time, not a span over the run: 3 iterations x 2 stages of its own rows
    assert {g.config: round(g.wall_seconds, 6) for g in report.groups} == {"a": 0.033, "b": 0.036, "c": 0.093}


def test_a_long_plan_asks_on_a_terminal_and_no_means_not_started(tmp_path: Path) -> None:
    import pty

    master, slave = pty.openpty()
    proc = start_wirepipe("bench", "--dataset", "block", "--format", "msgpack", "--codec", "none", "--transport",
                          "none", "--repetitions", "500000", "--iterations", "100", "--out", tmp_path, columns=100,
                          stdin=slave, stdout=slave)
    os.close(slave)
    seen = b""
    answered = False
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
        if not answered and b"run it (about" in seen:
            os.write(master, b"n\n")
            answered = True
    os.close(master)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert proc.wait(timeout=120) == ExitCode.CONFIG and answered, seen.decode(errors="replace")
    assert "not started" in stderr and "--quick" in stderr
    assert not (tmp_path / "bench.parquet").exists()
