"""Clusters: URL lists, R3 streams, and SIGKILL of a node mid-publish and mid-consume on a real 3-node cluster."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
from typing import Any

import pytest

from tests.nats_fixtures import WIREPIPE, wirepipe_env
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.connection import NatsConnectionConfig
from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
from wirepipe.connectors.nats.jetstream_source import JetStreamSource
from wirepipe.connectors.nats.server import LocalCluster
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


@pytest.mark.timeout(90)
def test_wirepipe_server_cluster_prints_the_url_list_serves_r3_and_stops_on_ctrl_c() -> None:
    proc = subprocess.Popen([*WIREPIPE, "server", "--cluster", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=wirepipe_env())
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
