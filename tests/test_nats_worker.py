"""Long-lived workers: SIGTERM/SIGKILL of a consuming worker process, restarts, monitoring, bounded memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.cli import cli_env, invoke, start_wirepipe, wirepipe
from tests.nats_fixtures import consumer_info, publish_numbered
from wirepipe.connectors.nats.jetstream_source import PULL_AHEAD, JetStreamSource
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.batch import Batch
from wirepipe.operators.deserialize import Deserialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink

TESTS = Path(__file__).parent

WORKER = """
name: archive
source:
  type: jetstream
  url: "${NATS_URL}"
  stream: NUM
  durable: archive
  batch_size: 200
  ack_wait: ${ACK_WAIT:-3s}
  stop_at_end: ${STOP_AT_END:-false}
operators:
  - deserialize: {format: auto}
  - map: {function: "nats_fixtures:slow_identity"}
sink: {type: parquet, path: "${OUT}/part-{part}.parquet"}
dead_letter: {type: jsonl, path: "${OUT}/dead.jsonl", append: true}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 200ms}
"""


def written(out: Path) -> list[int]:
    """Every ``i`` in the complete part files (a file without its final name is not read)."""
    seen: list[int] = []
    for f in sorted(out.glob("part-*.parquet")):
        seen += pq.read_table(f).column("i").to_pylist()
    return seen


def worker_path() -> str:
    """The workers' ``PYTHONPATH``: ``tests/`` (the configs name ``nats_fixtures`` functions) before the one a
    ``wirepipe`` subprocess gets (the code under test)."""
    return os.pathsep.join([str(TESTS), cli_env()["PYTHONPATH"]])


def acked_seqs(info: Any) -> int:
    """Stream sequences 1..ack_floor are acknowledged (one worker, so acks are contiguous)."""
    return info.ack_floor.stream_seq


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda sig: sig.name)
@pytest.mark.slow
async def test_signalled_worker_acks_only_what_it_wrote_and_a_restart_completes(
        nats_server: EmbeddedServer, tmp_path: Path, sig: signal.Signals) -> None:
    """A worker stopped mid-stream (a drain, or a SIGKILL holding records it was given and had not acknowledged),
    then restarted with ``stop_at_end``: the restart ends only once nothing is pending or unacknowledged, so it
    waits for what the dead worker held to come back after ``ack_wait``, and every record is in the sink. The
    only duplicates are records the first worker wrote and had not acknowledged, each counted as redelivered.
    (After a SIGKILL, ``ack_wait`` is longer than the restart takes to read the rest: a restart that ended when
    the stream looked read would miss what the dead worker held.)"""
    n = 6000
    url = nats_server.url
    await publish_numbered(url, n)
    config = tmp_path / "worker.yaml"
    config.write_text(WORKER)
    out = tmp_path / "out"
    env = {"NATS_URL": url, "OUT": str(out), "PYTHONPATH": worker_path(),
           "ACK_WAIT": "6s" if sig == signal.SIGKILL else "3s"}

    worker = start_wirepipe("run", str(config), env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(out.glob("part-*.parquet")):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        worker.send_signal(sig)
        _, stderr = await asyncio.to_thread(worker.communicate, timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    if sig == signal.SIGTERM:
        assert worker.returncode == 0, stderr
        assert "draining" in stderr
        assert "rec/s" in stderr  # the periodic status line
    else:
        assert worker.returncode == -signal.SIGKILL

    first = written(out)
    assert 0 < len(first) < n  # stopped mid-stream
    info = await consumer_info(url, "NUM", "archive")
    # Nothing acknowledged that is not in a complete Parquet file.
    assert set(range(acked_seqs(info))) <= set(first)
    if sig == signal.SIGTERM:
        assert acked_seqs(info) == len(set(first))  # the drain acked everything it wrote
    # Given to the first worker and not acknowledged (a drain gives back what it did not take: nak): the
    # restart gets them again.
    held = info.num_ack_pending
    written_unacked = len(set(first)) - acked_seqs(info)

    env["STOP_AT_END"] = "true"
    again = await asyncio.to_thread(wirepipe, "run", str(config), env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    summary = re.search(r"archive: (\d+) records out of (\d+) in .* (\d+) redelivered", again.stderr)
    assert summary is not None, again.stderr
    assert "awaiting redelivery" not in again.stderr
    everything = written(out)
    assert sorted(set(everything)) == list(range(n))  # every record reached the sink
    duplicates = len(everything) - n
    redelivered = int(summary[3])
    assert redelivered >= held
    # Every duplicate row is a redelivered record: those the first worker wrote without acknowledging, and
    # (on a machine slow enough that the restart's own records outlived ack_wait) what it was given twice.
    assert written_unacked <= duplicates <= written_unacked + redelivered - held
    assert int(summary[1]) == int(summary[2]) == n - len(first) + duplicates
    info = await consumer_info(url, "NUM", "archive")
    assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, n)
    assert not (out / "dead.jsonl").exists() or not (out / "dead.jsonl").read_text().strip()


@contextlib.asynccontextmanager
async def held_elsewhere(url: str, durable: str, held: int) -> AsyncIterator[list[Any]]:
    """Another reader of ``durable`` (created here, ``ack_wait`` 2 s) holding the stream's first ``held`` messages
    in progress for as long as the block runs: the server does not redeliver them."""
    import nats
    from nats.js import api

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_consumer("NUM", api.ConsumerConfig(durable_name=durable, ack_wait=2,
                                                    ack_policy=api.AckPolicy.EXPLICIT))
    msgs = await (await js.pull_subscribe_bind(durable, "NUM")).fetch(held, timeout=5)

    async def keep_in_progress() -> None:
        while True:
            for m in msgs:
                await m.in_progress()
            await asyncio.sleep(0.5)

    keeper = asyncio.ensure_future(keep_in_progress())
    try:
        yield msgs
    finally:
        keeper.cancel()
        await nc.close()


@pytest.mark.slow
async def test_a_bounded_run_that_ends_with_records_held_elsewhere_exits_6_and_counts_them(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """Another reader of the durable holds 100 records past the end of the stream (in progress: the server does
    not redeliver them): a ``stop_at_end`` run reads the other 200, waits ``ack_wait`` (and a grace) for the 100,
    then ends incomplete: exit 6, the summary counts them, and they are still unacknowledged on the server."""
    n, held = 300, 100
    url = nats_server.url
    await publish_numbered(url, n)
    async with held_elsewhere(url, "archive", held) as msgs:
        assert [m.metadata.sequence.stream for m in msgs] == list(range(1, held + 1))
        config = tmp_path / "worker.yaml"
        config.write_text(WORKER)
        out = tmp_path / "out"
        env = {"NATS_URL": url, "OUT": str(out), "PYTHONPATH": worker_path(), "STOP_AT_END": "true",
               "ACK_WAIT": "2s"}
        done = await asyncio.to_thread(wirepipe, "run", str(config), env=env, timeout=120)
        info = await consumer_info(url, "NUM", "archive")
    assert done.returncode == 6, done.stderr
    assert f"archive: {n - held} records out of {n - held} in " in done.stderr
    assert f", {held} records awaiting redelivery" in done.stderr
    assert sorted(written(out)) == list(range(held, n))  # the rest, each once
    assert (info.num_pending, info.num_ack_pending) == (0, held)


@pytest.mark.slow
async def test_prometheus_metrics_and_healthz(nats_url: str) -> None:
    await publish_numbered(nats_url, 300)
    source = JetStreamSource(stream="NUM", durable="prom", url=nats_url, duration=30)
    sink = TestingSink()
    pipe = Pipeline(source, [Deserialize("msgpack")], sink, name="prom-test",
                    monitor={"status_interval": 0, "prometheus": {"port": 0}})
    task = asyncio.ensure_future(pipe.run_async())
    for _ in range(500):
        if len(sink.records) >= 300 and pipe.stats.acked >= 300:
            break
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{pipe.last_run.monitor.port}"
    metrics = (await asyncio.to_thread(lambda: urllib.request.urlopen(base + "/metrics").read())).decode()
    health = await asyncio.to_thread(lambda: urllib.request.urlopen(base + "/healthz"))
    assert 'wirepipe_records_out_total{pipeline="prom-test"} 300.0' in metrics
    assert 'wirepipe_acked_total{pipeline="prom-test"} 300.0' in metrics
    assert "wirepipe_lag" in metrics and "wirepipe_up" in metrics
    assert health.status == 200
    source.stopping.set()
    await asyncio.wait_for(task, 10)


async def test_slow_sink_keeps_memory_bounded(nats_url: str) -> None:
    await publish_numbered(nats_url, 5000)
    source = JetStreamSource(stream="NUM", durable="slow", url=nats_url, batch_size=100,
                             count=1500)
    high = {"buffer": 0, "requested": 0, "queue": 0}

    class SlowSink(TestingSink):
        async def write(self, batch: Batch) -> None:
            high["buffer"] = max(high["buffer"], len(source.buffer))
            high["requested"] = max(high["requested"], source.pulls.requested)
            await asyncio.sleep(0.01)
            await super().write(batch)

    pipe = Pipeline(source, [Deserialize("msgpack")], SlowSink(), queue_size=2)
    stats = await pipe.run_async()
    assert stats.records_out == 1500
    # Neither the client buffer nor what was asked of the server grew past its bound while the sink lagged.
    # (asked-for and not yet taken counts what sits in the client queue too: it never passes PULL_AHEAD batches;
    # the queue may also hold one "409 Batch Completed" status per pull request, which carries max_bytes)
    assert high["buffer"] <= high["requested"] + 4
    assert high["requested"] <= source.buffer.max_buffered == PULL_AHEAD * 100
    assert (source.lag() or 0) > 0  # the rest stayed in the stream


def is_even(value: Any) -> bool:
    return value["i"] % 2 == 0


async def test_records_a_filter_drops_are_acknowledged_with_their_batch(nats_url: str) -> None:
    """A filter's dropped records are acked at the commit of the batch they came in: never delivered again
    after ``ack_wait`` (up to ``max_deliver`` times each), and a ``stop_at_end`` run, which ends once nothing is
    unacknowledged, ends."""
    from wirepipe.operators.filter import Filter

    await publish_numbered(nats_url, 1000)
    source = JetStreamSource(stream="NUM", durable="filtered", url=nats_url, batch_size=100, ack_wait=1,
                             stop_at_end=True)
    sink = TestingSink()
    stats = await asyncio.wait_for(Pipeline(source, [Deserialize("msgpack"), Filter(is_even)], sink).run_async(), 30)
    assert [r["i"] for r in sink.records] == list(range(0, 1000, 2)) and stats.records_out == 500
    await asyncio.sleep(1.5)  # past ack_wait: anything not acknowledged would be delivered again
    info = await consumer_info(nats_url, "NUM", "filtered")
    assert (info.num_ack_pending, info.num_redelivered, info.ack_floor.stream_seq) == (0, 0, 1000)


def test_a_source_that_takes_acks_is_committed_within_half_its_ack_wait() -> None:
    """A commit every ``flush_interval`` (1 s) to a durable whose ``ack_wait`` is 1 s would leave each batch's
    records unacknowledged for up to ack_wait: delivered again, duplicates of a healthy run. The run commits at
    least every half ``ack_wait`` for such a source; a source that takes no acks keeps ``flush_interval``."""
    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.pipelines.commits import commit_interval

    assert commit_interval(1.0, JetStreamSource(stream="S", durable="d", url="nats://h:1", ack_wait=1)) == 0.5
    assert commit_interval(1.0, JetStreamSource(stream="S", durable="d", url="nats://h:1", ack_wait=30)) == 1.0
    assert commit_interval(1.0, NatsSource("s", url="nats://h:1")) == 1.0


@pytest.mark.parametrize("readers", ["one pool of 3", "3 replicas"])
async def test_readers_of_a_shared_durable_never_wait_on_each_others_acks(nats_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         readers: str) -> None:
    """Three readers of one durable (``max_ack_pending`` 300), committing only at their ack pressure (the flush
    interval is an hour). Were each to commit at half of the whole, all three could hold records written and
    not committed, each under its pressure, while the server, at the limit, delivered to none. The workers of
    a pool each keep to their part (commit at half of it, ask ahead within the rest); replicas, which do not
    know of each other, notice that the server holds messages back (``wants_commit``) and commit. (At the end
    of the stream each still holds fewer than its pressure, for the drain to commit.)"""
    import wirepipe.connectors.nats.jetstream_source as jetstream_source
    import wirepipe.connectors.nats.pull_requests as pull_requests

    monkeypatch.setattr(jetstream_source, "LAG_REFRESH", 0.2)  # how soon an idle reader asks the server
    monkeypatch.setattr(pull_requests, "IDLE_TURN", 0.2)
    await publish_numbered(nats_url, 3000)
    sinks, pipes = [], []
    for index in range(3):
        source = JetStreamSource(stream="NUM", durable="shared", url=nats_url, batch_size=50, max_ack_pending=300,
                                 ack_wait=60)
        if readers == "one pool of 3":
            source = source.for_worker(index, 3)  # what each worker of a pool builds
        assert (source.ack_pressure, source.buffer.max_buffered) == ((50, 50) if readers == "one pool of 3"
                                                                      else (150, 150))
        sinks.append(TestingSink())
        pipes.append(Pipeline(source, [Deserialize("msgpack")], sinks[-1], flush_interval=3600))
    tasks = [asyncio.ensure_future(pipe.run_async()) for pipe in pipes]

    async def through_the_stream() -> None:
        while sum(pipe.stats.records_out for pipe in pipes) < 3000:
            assert not any(task.done() for task in tasks), [task.exception() for task in tasks if task.done()]
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(through_the_stream(), 25)  # well within ack_wait: nothing is redelivered
    finally:
        for pipe in pipes:
            pipe.source.stopping.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert sorted(r["i"] for sink in sinks for r in sink.records) == list(range(3000))
    assert (await consumer_info(nats_url, "NUM", "shared")).num_ack_pending == 0


@pytest.mark.parametrize("mode", ["slice", "thread"])
async def test_a_jetstream_worker_runs_long_passes_off_the_event_loop(nats_url: str, monkeypatch: pytest.MonkeyPatch,
                                                                      mode: str) -> None:
    """A JetStream source has a socket to serve (the next batches arriving, acks, heartbeats): a long operator
    pass runs in slices between which the event loop runs, or in a thread; every record is written and acked."""
    import threading

    import wirepipe.pipelines.run as run_module
    from wirepipe.operators.map import Map

    await publish_numbered(nats_url, 300)
    monkeypatch.setattr(run_module, "_OFFLOAD_NS", 0)  # every pass is "long"
    monkeypatch.setattr(run_module, "_OFFLOAD_MODE", mode)
    sliced = run_module.PipelineRun._run_sliced
    slices: list[int] = []

    async def counted(self: Any, batch: Batch) -> Batch:
        slices.append(len(batch.values))
        return await sliced(self, batch)

    monkeypatch.setattr(run_module.PipelineRun, "_run_sliced", counted)
    on_main: list[bool] = []

    def where(record: Any) -> Any:
        on_main.append(threading.current_thread() is threading.main_thread())
        return record

    source = JetStreamSource(stream="NUM", durable=f"offload-{mode}", url=nats_url, batch_size=100, count=300)
    sink = TestingSink()
    stats = await Pipeline(source, [Deserialize("msgpack"), Map(where)], sink).run_async()
    assert stats.records_out == 300 and len(sink.records) == 300 and stats.acked == 300
    assert len(on_main) == 300
    if mode == "slice":
        assert slices and all(on_main)
    else:
        assert not slices and not any(on_main)


def test_server_command_prints_its_url_and_stops_on_sigterm() -> None:
    proc = start_wirepipe("server")
    try:
        url = proc.stdout.readline().strip() if proc.stdout else ""
        assert url.startswith("nats://127.0.0.1:")
        import socket

        host, port = url.removeprefix("nats://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            assert s.recv(4) == b"INFO"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_server_on_a_port_in_use_says_so_and_exits_1(nats_server: EmbeddedServer) -> None:
    """Another server already listens on the port: one line on stderr, no URL on stdout, exit 1."""
    done = wirepipe("server", "--port", str(nats_server.port), timeout=30)
    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.startswith(f"error: port {nats_server.port} is in use"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_run_count_and_duration_override(tmp_path: Path) -> None:
    out = tmp_path / "pts.jsonl"
    cfg = tmp_path / "p.yaml"
    cfg.write_text(f"""
name: bounded
source: {{type: generate, dataset: point, rate: 2000}}
sink: {{type: jsonl, path: "{out}"}}
""")
    done = wirepipe("run", str(cfg), "--count", "123")
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == 123
    done = wirepipe("run", str(cfg), "--duration", "0.5s")
    assert done.returncode == 0, done.stderr
    assert 0 < len(out.read_text().splitlines()) < 100000
    bad = invoke("run", str(cfg), "--duration", "soon")
    assert bad.returncode == 2 and "duration" in bad.stderr


@pytest.mark.slow
def test_example_configs_run_against_a_server(nats_server: EmbeddedServer, tmp_path: Path) -> None:
    configs = TESTS.parent / "configs"
    env = {"NATS_URL": nats_server.url, "RESULTS": str(tmp_path / "out")}
    for name in ("nats-publish", "jetstream-publish", "jetstream-to-parquet", "relay"):
        path = configs / f"{name}.yaml"
        check = invoke("validate", str(path), env=env)
        assert check.returncode == 0, check.stderr
        done = wirepipe("run", str(path), "--count", "2000", env=env, timeout=120)
        assert done.returncode == 0, (name, done.stderr)
        assert "2000 records out of 2000" in done.stderr, (name, done.stderr)
    parts = list((tmp_path / "out" / "points").glob("part-*.parquet"))
    assert sum(pq.read_metadata(p).num_rows for p in parts) == 2000
    # nats-publish with no NATS_URL runs on its own embedded server.
    done = wirepipe("run", str(configs / "nats-publish.yaml"), "--count", "100")
    assert done.returncode == 0, done.stderr
    assert json.dumps(1)  # keep json imported for callers reading stderr


@pytest.mark.slow
async def test_a_durable_capture_to_the_end_with_records_held_elsewhere_exits_6(
        nats_server: EmbeddedServer, tmp_path: Path) -> None:
    """``wirepipe capture --durable --stop-at-end`` ends as a bounded run does: another reader of the durable holds
    100 of 300 records in progress, the capture writes the other 200, waits ``ack_wait`` (4 s here, set over the
    capture's own at least 30 s) and a grace, and exits 6 with the 100 counted as awaiting redelivery."""
    n, held = 300, 100
    url = nats_server.url
    await publish_numbered(url, n)
    async with held_elsewhere(url, "cap", held):
        done = await asyncio.to_thread(wirepipe, "capture", "--url", url, "--stream", "NUM", "--durable", "cap",
                                       "--stop-at-end", "--max-file-age", "1s", "--set", "source.ack_wait=4s",
                                       "--out", str(tmp_path / "cap"), timeout=180)
        info = await consumer_info(url, "NUM", "cap")
    assert done.returncode == 6, done.stderr
    assert f"{n - held} records captured into 1 file(s)" in done.stderr
    assert f", {held} records awaiting redelivery" in done.stderr
    assert (info.num_pending, info.num_ack_pending) == (0, held)
