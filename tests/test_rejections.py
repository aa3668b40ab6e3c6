"""Every rejection says why: runs, workers and pools name their rejections by stage, operator and reason,
and rejected records without a ``dead_letter`` land in a default file beside the output, named in the summary.
The same per-reason counts reach Prometheus and the metrics Parquet."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.cli import start_wirepipe, wirepipe
from tests.test_scale_pool import drain, running_pool, wait_for
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.batch import Rejected
from wirepipe.core.rejections import MAX_GROUPS, OTHER, Rejections, reason_of

TESTS = Path(__file__).parent
TOML_REASON = "serialize(toml): user: null has no TOML form (TOML has no null)"
UNDECLARED = ("serialize(bincode): record: unknown field(s) note (schema has i; extra_fields: drop on serialize "
              "leaves them out)")


# --- grouping ----------------------------------------------------------------------------------------


def test_reasons_group_without_the_values_that_vary() -> None:
    errors = ["ts: expected int64, got str '5'", "ts: expected int64, got str '77'",
              "items[3].qty: 4294967296 is out of range for uint32 (0..4294967295)",
              "items[12].qty: 5000000000 is out of range for uint32 (0..4294967295)",
              "in.jsonl:17: not a JSON line (Expecting value: line 1 column 1 (char 0))",
              "in.jsonl:902: not a JSON line (Expecting value: line 1 column 3 (char 2))",
              "Expected `int32`, got `str` - at `$.x`"]
    assert [reason_of(e) for e in errors] == [
        "ts: expected int64, got str '…'", "ts: expected int64, got str '…'",
        "items[N].qty: N is out of range for uint32 (N..N)", "items[N].qty: N is out of range for uint32 (N..N)",
        "in.jsonl:N: not a JSON line (Expecting value: line N column N (char N))",
        "in.jsonl:N: not a JSON line (Expecting value: line N column N (char N))",
        "Expected `int32`, got `str` - at `$.x`"]  # type names (int32) keep their digits
    r = Rejections()
    r.add([Rejected("deserialize", "msgpack", e, b"", meta={"seq": i}) for i, e in enumerate(errors)])
    assert len(r) == 7 and len(r.groups) == 4
    assert r.lines()[0] == "2 × deserialize(msgpack): ts: expected int64, got str '…' (first: seq 0: ts: expected " \
                           "int64, got str '5')"


def test_groups_are_bounded_and_merge_across_processes() -> None:
    r = Rejections()
    r.add([Rejected("map", "f", f"reason {'x' * i}", None) for i in range(MAX_GROUPS + 5)])
    assert len(r.groups) == MAX_GROUPS + 1 and len(r) == MAX_GROUPS + 5
    assert r.groups[("map", "f", OTHER)][0] == 5  # the reasons past the bound
    merged = Rejections.from_rows([*r.rows(), *r.rows()])
    assert len(merged) == 2 * (MAX_GROUPS + 5) and merged.groups[("map", "f", OTHER)][0] == 10
    lines = merged.lines(limit=3)
    assert len(lines) == 4 and lines[-1] == f"{2 * (MAX_GROUPS + 5) - 10 - 4} more in {MAX_GROUPS - 2} other " \
                                             "group(s) (see the dead letters)"


# --- a bounded run --------------------------------------------------------------------------------------


def _logs(path: Path, n: int) -> None:
    """n log records; every fifth has no user (null: TOML has no form for it)."""
    path.write_text("".join(json.dumps({"ts": i, "level": "info", "msg": f"m{i}", "user": None if i % 5 == 0 else "bob"})
                            + "\n" for i in range(n)))


def _run(*args: str, cwd: Path) -> Any:

    return wirepipe(*args, cwd=cwd, timeout=120)


@pytest.mark.slow
def test_a_bounded_run_names_its_rejections_and_writes_them_to_the_default_file(tmp_path: Path) -> None:
    _logs(tmp_path / "logs.jsonl", 2000)
    (tmp_path / "toml.yaml").write_text(
        "name: logs-toml\nsource: {type: jsonl, path: logs.jsonl, batch_size: 300}\n"
        "operators:\n  - serialize: {format: toml}\n"
        "sink: {type: jsonl, path: out/logs.toml.jsonl}\nmetrics: {path: results/logs.parquet}\n")
    res = _run("run", "toml.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "logs-toml: 1600 records out of 2000" in res.stderr and ", 400 rejected" in res.stderr
    assert f"  rejected: 400 × {TOML_REASON} (first: seq 0)\n" in res.stderr
    dead = tmp_path / "out" / "logs.toml.dead.jsonl"  # beside the output
    assert f"  dead letters: {dead.relative_to(tmp_path)} (400 appended as JSONL dead-letter envelopes: " \
           "the pipeline has no dead_letter)" in res.stderr
    envelopes = [json.loads(line) for line in dead.read_text().splitlines()]
    assert [e["seq"] for e in envelopes] == list(range(0, 2000, 5))
    assert {(e["stage"], e["operator"], e["error"]) for e in envelopes} == {
        ("serialize", "toml", "user: null has no TOML form (TOML has no null)")}
    assert json.loads(envelopes[1]["value_json"]) == {"ts": 5, "level": "info", "msg": "m5", "user": None}
    # the metrics Parquet: the same count by stage, operator and reason
    rows = pq.read_table(tmp_path / "results" / "logs.parquet").to_pylist()
    counted: dict[tuple[str, str, str], int] = {}
    for row in rows:
        for reason, n in row["reasons"] or []:
            key = (row["stage"], row["operator"], reason)
            counted[key] = counted.get(key, 0) + n
    assert counted == {("serialize", "toml", "user: null has no TOML form (TOML has no null)"): 400}
    assert sum(row["rejected"] for row in rows) == 400

    again = _run("run", "toml.yaml", cwd=tmp_path)  # a re-run appends: nothing nobody looked at is overwritten
    assert again.returncode == 0, again.stderr
    assert len(dead.read_text().splitlines()) == 800


def test_a_run_that_rejects_nothing_leaves_no_dead_letter_file(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("name: ok\nsource: {type: generate, dataset: point, count: 100}\n"
                                      "operators:\n  - serialize: {format: bincode}\n"
                                      "sink: {type: jsonl, path: out.jsonl}\n")
    res = _run("run", "ok.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "rejected:" not in res.stderr and sorted(p.name for p in tmp_path.iterdir()) == ["ok.yaml", "out.jsonl"]


@pytest.mark.slow
def test_a_projection_is_counted_in_the_summary_and_the_metrics(tmp_path: Path) -> None:
    """The issue's case: 20 log records, two with an `error` field the schema does not declare. Rejected by
    default (both named, written to the default file); with `extra_fields: drop`, counted as projected."""
    records = [{"ts": i, "level": "info", "msg": f"m{i}"} | ({"error": "boom"} if i in (3, 7) else {})
               for i in range(20)]
    (tmp_path / "logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    base = ("name: logs\nsource: {type: jsonl, path: logs.jsonl}\noperators:\n"
            "  - serialize: {format: bincode, schema: {ts: int64, level: string, msg: string}%s}\n"
            "  - deserialize: {format: bincode, schema: {ts: int64, level: string, msg: string}}\n"
            "sink: {type: jsonl, path: out.jsonl}\nmetrics: {path: results/logs.parquet}\n")
    (tmp_path / "reject.yaml").write_text(base % "")
    res = _run("run", "reject.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "18 records out of 20" in res.stderr
    assert ("  rejected: 2 × serialize(bincode): record: unknown field(s) error (schema has ts, level, msg; "
            "extra_fields: drop on serialize leaves them out) (first: seq 3)") in res.stderr
    assert [json.loads(line)["seq"] for line in (tmp_path / "out.dead.jsonl").read_text().splitlines()] == [3, 7]

    (tmp_path / "drop.yaml").write_text(base % ", extra_fields: drop")
    (tmp_path / "out.jsonl").unlink()
    res = _run("run", "drop.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "logs: 20 records out of 20" in res.stderr and ", 0 rejected, 2 projected" in res.stderr
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert out == [{k: v for k, v in r.items() if k != "error"} for r in records]
    rows = pq.read_table(tmp_path / "results" / "logs.parquet").to_pylist()
    assert sum(r["projected"] for r in rows if r["stage"] == "serialize") == 2
    assert sum(r["projected"] for r in rows) == 2


# --- a worker and a pool ------------------------------------------------------------------------------------


async def _publish(url: str, n: int) -> None:
    """``{"i": i}`` into stream NUM; every tenth record also has a `note` field the bincode schema lacks."""
    import msgpack
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="NUM", subjects=["num"])
    futures = [await js.publish_async("num", msgpack.packb({"i": i} | ({"note": f"n{i}"} if i % 10 == 0 else {})),
                                      headers={"Content-Type": "application/msgpack", "Nats-Msg-Id": str(i)})
               for i in range(n)]
    await asyncio.gather(*futures)
    await nc.close()


WORKER = """
name: notes
source: {type: jetstream, url: "${NATS_URL}", stream: NUM, batch_size: 200, ack_wait: 5s}
operators:
  - deserialize: {format: auto}
  - serialize: {format: bincode, schema: {i: int64}}
sink: {type: parquet, path: "${OUT}/part-{part}.parquet"}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 500ms, prometheus: {port: 0}}
"""


def _written(out: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in out.glob("part-*.parquet"))


def _scrape(log: Path, wanted: str) -> str | None:
    """The Prometheus page of the run logging to ``log``, once it holds ``wanted``."""
    port = int(re.search(r"metrics on http://127.0.0.1:(\d+)/metrics", log.read_text())[1])  # type: ignore[index]
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return body if wanted in body else None


def _reason_metric(pipeline: str, n: int, worker: str = "") -> str:
    """The exposition line of ``n`` rejections for UNDECLARED (labels in Prometheus's sorted order)."""
    return (f'wirepipe_rejections_total{{operator="bincode",pipeline="{pipeline}",reason="record: unknown field(s) '
            f'note (schema has i; extra_fields: drop on serialize leaves them out)",stage="serialize"'
            f'{f",worker={chr(34)}{worker}{chr(34)}" if worker else ""}}} {float(n)}')


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_worker_names_its_rejections_on_prometheus_and_in_its_final_summary(nats_server: EmbeddedServer,
                                                                              tmp_path: Path) -> None:
    """A long-lived worker (`wirepipe run` on a JetStream durable, stopped by SIGTERM): Prometheus counts the
    rejects by reason while it runs, its final summary names them and the default file beside its output."""
    n = 3000
    asyncio.run(_publish(nats_server.url, n))
    out = tmp_path / "out"
    (tmp_path / "worker.yaml").write_text(WORKER)
    log = tmp_path / "worker.log"
    with open(log, "w") as err:
        worker = start_wirepipe("run", tmp_path / "worker.yaml", cwd=tmp_path, stdout=None, stderr=err,
                                env={"NATS_URL": nats_server.url, "OUT": str(out)})
    try:
        wait_for(lambda: _written(out) == n - n // 10, 60, None, log)
        metrics = wait_for(lambda: _scrape(log, _reason_metric("notes", n // 10)), 30, None, log)
        assert f'wirepipe_rejected_total{{pipeline="notes"}} {float(n // 10)}' in metrics
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert f"notes: {n - n // 10} records out of {n}" in text and f", {n // 10} rejected" in text
    assert f"  rejected: {n // 10} × {UNDECLARED} (first: seq 1)\n" in text  # the stream sequence
    dead = tmp_path / "out.part.dead.jsonl"  # beside the folder of parts: pyarrow.dataset(out) reads the parts alone
    assert f"  dead letters: {dead} ({n // 10} appended as JSONL dead-letter envelopes" in text
    import pyarrow.dataset as ds

    assert ds.dataset(out).to_table().num_rows == n - n // 10  # the tutorial's idiom reads the folder whole
    assert sorted(json.loads(line)["seq"] for line in dead.read_text().splitlines()) == list(range(1, n + 1, 10))


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_pool_sums_its_workers_rejections_and_names_each_workers_file(nats_server: EmbeddedServer,
                                                                       tmp_path: Path) -> None:
    n = 6000
    asyncio.run(_publish(nats_server.url, n))
    out = tmp_path / "out"
    cfg = tmp_path / "notes.yaml"
    cfg.write_text(WORKER)
    log = tmp_path / "pool.log"
    with running_pool(cfg, 2, {"NATS_URL": nats_server.url, "OUT": str(out)}, log) as proc:
        wait_for(lambda: _written(out) == n - n // 10, 90, proc, log)
        # a worker reports twice a second: wait for the last reports, then every count is final
        time.sleep(1.5)
        metrics = wait_for(lambda: _scrape(log, "wirepipe_rejections_total"), 30, proc, log)
        drain(proc, log)
    text = log.read_text()
    assert f"notes: 2 workers, {n - n // 10} records out of {n}" in text and f", {n // 10} rejected" in text
    assert f"\n  rejected: {n // 10} × {UNDECLARED} (first: seq " in text
    files = {w: tmp_path / f"out.part-{w}.dead.jsonl" for w in ("w0", "w1")}
    seqs = {w: [json.loads(line)["seq"] for line in f.read_text().splitlines()] if f.exists() else []
            for w, f in files.items()}
    # every reject in one worker's file, once (seq: the stream sequence, from 1)
    assert sorted(seqs["w0"] + seqs["w1"]) == list(range(1, n + 1, 10))
    pool_summary = text[text.rindex("notes: 2 workers"):]
    for w, got in seqs.items():  # each worker's file, with what it appended, in the pool's summary
        assert (f"\n  {w} dead letters: {files[w]} ({len(got)} appended as JSONL dead-letter envelopes: the "
                "pipeline has no dead_letter)" in pool_summary) == bool(got), pool_summary
    # each worker's own final summary names what it rejected; Prometheus labels each worker's count
    per_worker = [int(m) for m in re.findall(rf"\[w\d\]: notes: .*\n  rejected: (\d+) × {re.escape(UNDECLARED)}",
                                             text)]
    assert sorted(per_worker) == sorted(len(s) for s in seqs.values() if s)
    for w, got in seqs.items():
        assert (_reason_metric("notes", len(got), w[1]) in metrics) == bool(got), metrics


def test_the_default_file_is_beside_the_output_else_in_the_results_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from wirepipe.connectors.capture_sink import CaptureSink
    from wirepipe.connectors.jsonl import JsonlSink
    from wirepipe.connectors.nats.core_sink import NatsSink
    from wirepipe.connectors.null import NullSink
    from wirepipe.connectors.parquet import ParquetSink
    from wirepipe.pipelines.dead_letters import default_path

    monkeypatch.delenv("WIREPIPE_WORKER", raising=False)
    assert default_path("p", JsonlSink("out/logs.jsonl"), None) == Path("out/logs.dead.jsonl")
    # beside a folder of Parquet parts, never in it: pyarrow.dataset("out") reads the parts alone
    assert default_path("p", ParquetSink("out/part-w1-{part}.parquet"), None) == Path("out.part-w1.dead.jsonl")
    assert default_path("p", ParquetSink("out/one.parquet"), None) == Path("out/one.dead.jsonl")
    assert default_path("p", CaptureSink("cap", prefix="points"), None) == Path("cap.points.dead.jsonl")
    nats = NatsSink("points", url="nats://127.0.0.1:4222")
    assert default_path("p", nats, "results/p.parquet") == Path("results/p.dead.jsonl")
    assert default_path("p", NullSink(), None) == Path("results/p.dead.jsonl")
    assert default_path("p", JsonlSink("-"), None) == Path("results/p.dead.jsonl")  # stdout: no file to be beside
    # a replay's file is its own: never the one a live run of the same pipeline appends to
    assert default_path("p", JsonlSink("out/logs.jsonl"), None, "replay") == Path("out/logs.replay.dead.jsonl")
    assert default_path("p", nats, "results/p.parquet", "replay") == Path("results/p.replay.dead.jsonl")
    monkeypatch.setenv("WIREPIPE_WORKER", "1")
    monkeypatch.setenv("WIREPIPE_WORKERS", "2")  # a pool's workers share the results folder: one file each
    assert default_path("p", nats, "results/p.parquet") == Path("results/p.w1.dead.jsonl")
    assert default_path("p", None, None) == Path("results/p.w1.dead.jsonl")
    assert default_path("p", nats, "results/p.parquet", "replay") == Path("results/p.w1.replay.dead.jsonl")


async def test_what_the_server_refuses_at_its_ack_is_counted_by_reason_in_the_metrics(nats_server: EmbeddedServer,
                                                                                     tmp_path: Path) -> None:
    """JetStream refuses a record larger than the stream's max_msg_size when it answers the publish, after the
    sink's write returned: the record is dead-lettered at the commit, and a sink row of no records carries the
    count by reason, so the stage rows hold every reject the summary names."""
    import msgpack

    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.operators.serialize import Serialize
    from wirepipe.testing import TestingSink, TestingSource, run_async

    records = [{"i": i, "pad": "x" * (400 if i % 4 == 0 else 10)} for i in range(20)]
    sink = JetStreamSink("small", url=nats_server.url, stream={"name": "SMALL", "subjects": ["small"],
                                                               "max_msg_size": 200})
    dead = TestingSink()
    stats = await run_async(TestingSource(records, batch_size=10), [Serialize("msgpack")], sink, dead_letter=dead,
                            metrics=str(tmp_path / "m.parquet"))
    assert stats.rejected == 5  # written, then refused by the server
    assert sorted(msgpack.unpackb(r.value)["i"] for r in dead.rejects) == [0, 4, 8, 12, 16]
    assert [(row[0], row[1], row[3]) for row in stats.rejections.rows()] == [("publish", "jetstream", 5)]
    reason = stats.rejections.rows()[0][2]
    rows = pq.read_table(tmp_path / "m.parquet").to_pylist()
    refused = [r for r in rows if r["stage"] == "publish" and r["rejected"]]
    assert sum(r["rejected"] for r in refused) == 5 and all(r["records"] == 0 for r in refused)
    assert sum(n for r in refused for why, n in r["reasons"] if why == reason) == 5


async def test_dead_letters_their_destination_refuses_go_to_the_default_file(nats_server: EmbeddedServer,
                                                                            tmp_path: Path) -> None:
    """A JetStream dead letter on a subject no stream stores is refused record by record ("no responders"):
    those dead letters are written to the default dead-letter file with both reasons, never dropped, and the
    summary names the file."""
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.monitor import dead_letter_destination
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSink, TestingSource

    records = [{"x": i, "y": "bad" if i % 5 == 0 else i} for i in range(20)]
    sink = TestingSink()
    pipe = Pipeline(TestingSource(records, batch_size=7), [Serialize("bincode", schema="point")], sink,
                    dead_letter=JetStreamSink("nowhere.dead", url=nats_server.url), metrics=str(tmp_path / "m.parquet"))
    stats = await pipe.run_async()
    assert stats.rejected == 4 and sink.count == 16
    lines = [json.loads(line) for line in (tmp_path / "m.dead.jsonl").read_text().splitlines()]
    assert [json.loads(base64.b64decode(e["payload"]["$base64"])) for e in lines] == [records[i] for i in (0, 5, 10, 15)]
    assert len(lines) == 4 and all("a dead letter of serialize: " in e["error"] and "y" in e["error"] for e in lines)
    where = dead_letter_destination(pipe.last_run)
    assert where is not None and f"4 it refused went to {tmp_path / 'm.dead.jsonl'}" in where


@pytest.mark.parametrize("kind", ["nats", "jetstream"])
async def test_dead_letters_no_publish_can_carry_go_to_the_default_file(nats_server: EmbeddedServer, tmp_path: Path,
                                                                        kind: str) -> None:
    """A dead letter larger than the server's max_payload cannot be published to a NATS dead-letter subject:
    it goes to the default dead-letter file (with the refusal and the reason it was a dead letter), the rest
    of the dead letters are published."""
    import nats

    from wirepipe.connectors.nats.core_sink import NatsSink
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSink, TestingSource

    records = [{"x": i, "y": i} for i in range(10)] + [{"x": 10, "y": "bad"}, {"x": 11, "y": "z" * 2_000_000}]
    nc = await nats.connect(nats_server.url)
    got: list[Any] = []

    async def keep(msg: Any) -> None:
        got.append(msg)

    sub = await nc.subscribe("dlq", cb=keep)
    dead = (NatsSink("dlq", url=nats_server.url) if kind == "nats" else
            JetStreamSink("dlq", url=nats_server.url, stream={"name": "DLQ", "subjects": ["dlq"]}))
    sink = TestingSink()
    pipe = Pipeline(TestingSource(records, batch_size=12), [Serialize("bincode", schema="point")], sink,
                    dead_letter=dead, metrics=str(tmp_path / "m.parquet"))
    stats = await pipe.run_async()
    await nc.flush()
    for _ in range(50):
        if got:
            break
        await asyncio.sleep(0.05)
    await sub.unsubscribe()
    await nc.close()
    assert stats.rejected == 2 and sink.count == 10
    assert [json.loads(m.data)["x"] for m in got] == [10]  # the one that fits was published
    lines = [json.loads(line) for line in (tmp_path / "m.dead.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and "a dead letter of serialize: " in lines[0]["error"]
    assert json.loads(base64.b64decode(lines[0]["payload"]["$base64"]))["x"] == 11


def test_projected_records_are_counted_on_the_status_line_and_prometheus() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.monitor import snapshot, status_line
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.pipelines.prometheus import MetricsCollector
    from wirepipe.testing import TestingSink, TestingSource

    records = [{"x": i, "y": i} | ({"note": "n"} if i % 4 == 0 else {}) for i in range(10)]
    sink = TestingSink()
    pipe = Pipeline(TestingSource(records, batch_size=3), [Serialize("bincode", schema="point", extra_fields="drop")],
                    sink, name="proj", dead_letter=sink)
    stats = pipe.run()
    assert stats.projected == 3 and stats.rejected == 0 and len(sink.records) == 10
    snap = snapshot(pipe.last_run)
    assert snap["projected"] == 3
    assert "3 projected" in status_line("proj", snap, None, 1.0)
    registry = CollectorRegistry()
    registry.register(MetricsCollector(lambda: [({"pipeline": "proj"}, snap)]))
    assert 'wirepipe_projected_total{pipeline="proj"} 3.0' in generate_latest(registry).decode()
