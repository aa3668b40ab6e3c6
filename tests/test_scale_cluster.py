"""Clusters: URL lists, R3 streams, and SIGKILL of a node mid-publish and mid-consume on a real 3-node cluster."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli import start_wirepipe
from tests.test_scale_pool import column, drain, per_worker, running_pool, scrape, wait_for
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.connection import NatsConnectionConfig
from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.nats.server import EmbeddedServer, LocalCluster
from wirepipe.connectors.nats.streams import StreamConfig
from wirepipe.core.errors import ConfigError
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.config import validate_config
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink


def test_url_fields_take_a_yaml_list_or_a_comma_separated_string() -> None:
    listed = NatsConnectionConfig(url=["nats://a:4222", "nats://b:4222"])
    comma = NatsConnectionConfig(url="nats://a:4222, nats://b:4222,nats://c:4222")
    assert listed.url == ["nats://a:4222", "nats://b:4222"]
    assert comma.url == ["nats://a:4222", "nats://b:4222", "nats://c:4222"]
    assert NatsConnectionConfig(url="nats://a:4222").url == "nats://a:4222"
    assert NatsConnectionConfig(url="nats://a:1,nats://b:2").url == ["nats://a:1", "nats://b:2"]
    with pytest.raises(ConfigError, match=r"source.url: `embedded` cannot be part of a url list"):
        validate_config({"name": "x", "source": {"type": "nats", "subject": "s", "url": "embedded,nats://a:1"}},
                        file="p.yaml")


def test_stream_replicas_are_1_to_5_and_placement_reaches_jetstream() -> None:
    spec = StreamConfig(name="S", replicas=3, placement={"cluster": "east", "tags": ["ssd"]})
    api = spec.api_config("s")
    assert api.num_replicas == 3 and api.placement.cluster == "east" and api.placement.tags == ["ssd"]
    sink = {"type": "jetstream", "subject": "s", "url": "nats://a:1", "stream": {"name": "S", "replicas": 6}}
    with pytest.raises(ConfigError, match=r"p.yaml: sink.stream.replicas: .*less than or equal to 5 \(got 6\)"):
        validate_config({"name": "x", "source": {"type": "generate", "dataset": "point"}, "sink": sink},
                        file="p.yaml")


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("server", ["one", "cluster"])
def test_a_port_taken_between_its_choice_and_the_servers_bind_is_chosen_again(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing holds a free port until nats-server listens on it: another process (a test beside this one) may
    take it first. The first port handed out here is one a socket holds: the server, or the whole cluster
    (its routes name each other's ports), starts again on fresh ones."""
    import wirepipe.connectors.nats.server as server_module

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    free_port = server_module.free_port
    handed = iter([held.getsockname()[1]])
    monkeypatch.setattr(server_module, "free_port", lambda: next(handed, None) or free_port())
    try:
        started = EmbeddedServer() if server == "one" else LocalCluster(3)
        with started:
            urls = [started.url] if isinstance(started, EmbeddedServer) else started.urls
            assert all(not u.endswith(f":{held.getsockname()[1]}") for u in urls)
            for url in urls:
                with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=5) as s:
                    assert s.recv(4) == b"INFO"
    finally:
        held.close()


@pytest.mark.timeout(90)
@pytest.mark.slow
def test_wirepipe_server_cluster_prints_the_url_list_serves_r3_and_stops_on_ctrl_c() -> None:
    proc = start_wirepipe("server", "--cluster", "3")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        urls = line.split(",")
        assert len(urls) == 3 and all(u.startswith("nats://127.0.0.1:") for u in urls), line
        ports = [int(u.rsplit(":", 1)[1]) for u in urls]

        async def r3() -> Any:
            import nats

            nc = await nats.connect(urls)
            js = nc.jetstream()
            await js.add_stream(name="R3", subjects=["r3"], num_replicas=3)
            await js.publish("r3", b"x")
            info = await js.stream_info("R3")
            await nc.close()
            return info

        info = asyncio.run(r3())
        assert info.state.messages == 1 and len(info.cluster.replicas) == 2  # a leader and two followers
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert not any(accepts(p) for p in ports)  # every node stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def stream_info(url: str, stream: str) -> Any:
    import nats

    nc = await nats.connect(url.split(","))
    try:
        return await nc.jetstream().stream_info(stream)
    finally:
        await nc.close()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("victim", ["leader", "follower"])
@pytest.mark.slow
async def test_sigkill_of_a_node_of_an_r3_cluster_loses_nothing(nats_cluster: LocalCluster, victim: str) -> None:
    """Publish N into an R3 stream and consume it with a durable while one node is SIGKILLed and restarted:
    exactly N in the stream (retries carry the same Nats-Msg-Id), all N in the output (duplicates counted)."""
    n = 20000
    url = nats_cluster.url  # "nats://...,nats://...,nats://...": the client fails over between them
    opts = dict(url=url, reconnect={"wait": 0.05, "max_wait": 0.5})
    sink = JetStreamSink("r3fault", **opts, stream={"name": "R3FAULT", "replicas": 3}, ack_timeout=2.0)
    publisher = Pipeline(GenerateSource("point", count=n, rate=6000, batch_size=200),
                         [Serialize("msgpack")], sink, name="r3-pub")
    out = TestingSink()
    source = JetStreamSource("r3fault", stream="R3FAULT", durable="r3-consumer", **opts, batch_size=500,
                             heartbeat=1.0, expires=5.0, ack_wait=5.0, duration=130)
    consumer = Pipeline(source, [Deserialize("msgpack")], out, flush_interval=0.2)
    pub_task = asyncio.ensure_future(publisher.run_async())
    while sink.acked < n // 4:
        assert not pub_task.done(), pub_task
        await asyncio.sleep(0.01)
    cons_task = asyncio.ensure_future(consumer.run_async())
    while len(out.records) < n // 10:
        assert not cons_task.done(), cons_task
        await asyncio.sleep(0.01)

    info = (await stream_info(url, "R3FAULT")).cluster
    name = info.leader if victim == "leader" else info.replicas[0].name
    node = nats_cluster.node(name)
    await asyncio.to_thread(node.kill)  # SIGKILL mid-publish and mid-consume
    await asyncio.sleep(1.0)
    await asyncio.to_thread(node.start)  # same port, same store
    pub_stats = await asyncio.wait_for(pub_task, 100)
    assert pub_stats.records_out == n
    await asyncio.to_thread(nats_cluster.wait_healthy, 60)

    state = (await stream_info(url, "R3FAULT")).state
    assert state.messages == n  # exactly N

    for _ in range(4000):
        if len(set(out.meta.get("stream_seq", []))) >= n:
            break
        assert not cons_task.done(), cons_task
        await asyncio.sleep(0.02)
    source.stopping.set()
    await asyncio.wait_for(cons_task, 30)
    seqs = out.meta["stream_seq"]
    assert set(seqs) == set(range(1, n + 1))  # all N in the output
    duplicates = len(seqs) - len(set(seqs))  # redeliveries after the kill: counted, not lost
    print(f"{victim} {name} killed: {duplicates} duplicates delivered, "
          f"{sink.conn.stats.reconnects + source.conn.stats.reconnects} reconnects")


@pytest.mark.timeout(90)
@pytest.mark.slow
async def test_nats_warnings_name_the_server_that_failed(nats_server: EmbeddedServer,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A URL list whose first server never answers: the warnings of a node's death name that node, each refused
    reconnect names the server that refused, the reconnect names the node it found again, a connect that fails
    names every server of the list."""
    from wirepipe.connectors.nats.connection import NatsConnection
    from wirepipe.connectors.nats.server import free_port
    from wirepipe.core.errors import WirepipeError

    dead = f"nats://127.0.0.1:{free_port()}"
    node = nats_server
    conn = NatsConnection(NatsConnectionConfig(url=[dead, node.url], reconnect={"wait": 0.05, "max_wait": 0.2}),
                          role="consumer")
    await conn.connect()
    try:
        assert conn.url == node.url  # where it is connected, not the head of the list
        with caplog.at_level("WARNING", logger="wirepipe.nats"):
            await asyncio.to_thread(node.kill)
            await asyncio.sleep(1.5)  # reconnect attempts: both servers refuse
            await asyncio.to_thread(node.restart)
            for _ in range(400):
                if conn.stats.reconnects:
                    break
                await asyncio.sleep(0.05)
        assert conn.stats.reconnects == 1 and conn.url == node.url
        lines = [r.getMessage() for r in caplog.records]
        assert f"NATS consumer disconnected from {node.url} (disconnect #1); reconnecting" in lines, lines
        assert f"NATS consumer reconnected to {node.url} (reconnect #1)" in lines, lines
        # each refused reconnect names the server being tried (before: the head of the list, every time)
        refused = [re.fullmatch(r"NATS consumer \((nats://127.0.0.1:\d+)\): connection refused", line)
                   for line in lines if line.endswith("connection refused") and line.startswith("NATS consumer")]
        assert refused and all(m is not None for m in refused), lines
        assert {m[1] for m in refused if m is not None} == {dead, node.url}, lines
    finally:
        await conn.close()
    lost = NatsConnection(NatsConnectionConfig(url=[dead, f"nats://127.0.0.1:{free_port()}"], connect_timeout=1.0))
    with pytest.raises(WirepipeError, match=rf"cannot connect to NATS at {dead}, nats://127.0.0.1:\d+ within 1s"):
        await lost.connect()


R3_POOL = """
name: r3pool
source: {type: jetstream, url: "${NATS_URL}", stream: R3POOL, batch_size: 200, ack_wait: 3s, heartbeat: 1s,
         expires: 5s, reconnect: {wait: 50ms, max_wait: 500ms}}
operators:
  - deserialize: {format: msgpack}
  - map: {function: "nats_fixtures:slow_identity"}
sink: {type: parquet, path: "${OUT}/part-{part}.parquet"}
metrics: {path: "${METRICS}"}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 500ms, prometheus: {port: 0}}
"""


async def _publish_r3(url: str, n: int) -> None:
    """``{"i": i}`` for i in 0..n-1 into a new R3 stream (each with its Nats-Msg-Id)."""
    import msgpack
    import nats

    nc = await nats.connect(url.split(","))
    js = nc.jetstream()
    await js.add_stream(name="R3POOL", subjects=["r3pool"], num_replicas=3)
    futures = []
    for i in range(n):
        futures.append(await js.publish_async("r3pool", msgpack.packb({"i": i}), headers={"Nats-Msg-Id": str(i)}))
        if len(futures) >= 2000:
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)
    await nc.close()


def _leader(cluster: LocalCluster, stream: str) -> str:
    """The stream's leader, once the cluster is whole and has elected one."""
    import nats.errors

    cluster.wait_healthy(60)
    for _ in range(60):
        with contextlib.suppress(nats.errors.TimeoutError):
            leader = asyncio.run(stream_info(cluster.url, stream)).cluster.leader
            if leader:
                return str(leader)
        time.sleep(0.5)
    raise AssertionError(f"stream {stream} has no leader")


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_a_pool_counts_every_duplicate_of_a_stream_leader_failover(nats_cluster: LocalCluster,
                                                                   tmp_path: Path) -> None:
    """Pool of 2 on an R3 stream; the stream leader is SIGKILLed and restarted twice mid-consume. No row is
    missing, and every duplicate row written is accounted for: the records read again (delivered before) are
    counted alike in the status line, Prometheus, the run summary and the metrics Parquet, and are at least the
    duplicate rows. Records out are exactly the rows written; the lag of the drained stream is 0."""
    import pyarrow.dataset as ds

    n = 20000
    asyncio.run(_publish_r3(nats_cluster.url, n))
    out, metrics = tmp_path / "out", tmp_path / "metrics"
    cfg = tmp_path / "r3pool.yaml"
    cfg.write_text(R3_POOL)
    log = tmp_path / "pool.log"
    tests = Path(__file__).parent
    env = {"NATS_URL": nats_cluster.url, "OUT": str(out), "METRICS": str(metrics), "PYTHONPATH": str(tests)}
    with running_pool(cfg, 2, env, log) as proc:
        port = int(wait_for(lambda: re.search(r"metrics on http://127.0.0.1:(\d+)/metrics", log.read_text()), 60,
                            proc, log)[1])
        for share in (4, 2):  # a failover at a quarter of the stream and another at half
            wait_for(lambda share=share: len(column(out, "i")) >= n // share, 120, proc, log)
            node = nats_cluster.node(_leader(nats_cluster, "R3POOL"))
            node.kill()
            time.sleep(1.0)
            node.start()
        wait_for(lambda: set(column(out, "i")) >= set(range(n)), 150, proc, log)
        nats_cluster.wait_healthy(60)

        seen: list[tuple[float, dict[str, float]]] = []

        def settled() -> dict[str, float] | None:
            """Every row committed and counted, the stream drained, and no redelivery for longer than ack_wait
            (a delivery whose ack a failover lost comes again ack_wait after it: lag counts only the unsent)."""
            rows = len(column(out, "i"))
            body = scrape(port, "") or ""
            out_, lag = per_worker(body, "records_out_total"), per_worker(body, "lag")
            if sum(out_.values()) != rows or len(lag) != 2 or any(lag.values()):
                return None
            redelivered = per_worker(body, "redelivered_total")
            if not seen or seen[-1][1] != redelivered:
                seen.append((time.monotonic(), redelivered))
            return redelivered if time.monotonic() - seen[-1][0] > 4.0 else None

        redelivered = wait_for(settled, 60, proc, log)
        time.sleep(1.0)  # two more status lines
        status = log.read_text().strip().splitlines()
        drain(proc, log)
    rows = column(out, "i")
    assert set(rows) == set(range(n))  # no row missing
    duplicates = len(rows) - n
    counted = int(sum(redelivered.values()))
    text = log.read_text()
    summary = re.search(r"r3pool: 2 workers, (\d+) records out of (\d+) in .*, (\d+) redelivered, 0 restarts", text)
    assert summary is not None, text[-3000:]
    assert int(summary[1]) == len(rows)  # records out: the rows written, exactly
    assert int(summary[3]) == counted  # the summary and Prometheus agree
    line = [s for s in status if s.startswith("r3pool [2 workers]")][-1]
    assert ", lag 0," in line and (f", {counted:,} redelivered," in line if counted else "redelivered" not in line)
    stages = ds.dataset(str(metrics), format="parquet").to_table(columns=["redelivered"]).column(0).to_pylist()
    assert sum(v for v in stages if v) == counted  # and the metrics Parquet
    assert counted >= duplicates  # every duplicate row written is among the records counted as read again
    print(f"{duplicates} duplicate rows, {counted} redelivered records counted")


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_pool_started_while_the_cluster_has_no_leader_waits_for_it(nats_cluster: LocalCluster,
                                                                     tmp_path: Path) -> None:
    """Two of three nodes down (no quorum, no leader): the workers of a pool say they wait for the leader, no
    traceback, no restart; once the nodes are back they consume every record once and drain (exit 0)."""
    import json

    n = 3000
    asyncio.run(_publish_r3(nats_cluster.url, n))
    down = nats_cluster.nodes[1:]
    for node in down:
        node.kill()
    cfg = tmp_path / "waits.yaml"
    cfg.write_text(json.dumps({
        "name": "waits", "source": {"type": "jetstream", "url": nats_cluster.url, "stream": "R3POOL",
                                    "heartbeat": "1s", "expires": "5s"},
        "operators": [{"deserialize": {"format": "msgpack"}}],
        "sink": {"type": "jsonl", "path": str(tmp_path / "out-{worker}.jsonl")},
        "flush_interval": "200ms", "monitor": {"status_interval": "1s"}}))
    log = tmp_path / "pool.log"

    def written() -> list[int]:
        return [json.loads(line)["i"] for f in sorted(tmp_path.glob("out-*.jsonl")) for line in f.open()]

    with running_pool(cfg, 2, {}, log) as proc:
        waiting = "jetstream consumer of R3POOL: JetStream does not answer"
        wait_for(lambda: log.read_text().count(waiting) >= 2, 60, proc, log)  # both workers say they wait
        time.sleep(3.0)  # longer than a request's timeout: still waiting, not dying
        for node in down:
            node.start()
        wait_for(lambda: len(written()) >= n, 90, proc, log)
        drain(proc, log)
    text = log.read_text()
    assert "Traceback" not in text and " died " not in text, text[-3000:]
    assert "answers again after" in text
    assert sorted(written()) == list(range(n))  # each record once
    assert re.search(rf"waits: 2 workers, {n} records out of {n} in .*, 0 redelivered, 0 restarts", text), text[-2000:]
