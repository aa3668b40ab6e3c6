"""Core NATS connectors against a real nats-server: round trips, subjects, headers, limits, drops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.nats_fixtures import ODD_HEADERS, expected
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.jsonl import JsonlSink
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.batch import Batch
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.route import Subject
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink, TestingSource
from wirepipe.wire import Header


async def consume_while(source: NatsSource, pipeline: Pipeline, produce: Any) -> Any:
    """Run a consuming pipeline, run ``produce`` once it is subscribed, return the consumer's stats."""
    task = asyncio.ensure_future(pipeline.run_async())
    for _ in range(500):
        if source.ready.is_set() or task.done():
            break
        await asyncio.sleep(0.01)
    await produce()
    return await asyncio.wait_for(task, 30)


@pytest.mark.parametrize(("fmt", "codec"), [("msgpack", "zstd"), ("json", "gzip"), ("orjson", "lz4"),
                                            ("msgpack-array", "none"), ("cbor", "brotli")])
async def test_core_round_trip_decodes_by_headers(nats_url: str, fmt: str, codec: str) -> None:
    n = 1500
    opts = dict(url=nats_url)
    out = TestingSink()
    source = NatsSource("rt.>", **opts, count=n, batch_size=256)
    consumer = Pipeline(source, [Decompress("auto"), Deserialize("auto", schema="point")], out)
    publisher = Pipeline(GenerateSource("point", count=n, batch_size=300),
                         [Serialize(fmt), Compress(codec)], NatsSink("rt.{seq}", **opts))

    stats = await consume_while(source, consumer, publisher.run_async)
    assert stats.records_out == n and stats.rejected == 0
    assert out.records == expected("point", n)
    assert out.subjects[:3] == ["rt.0", "rt.1", "rt.2"]
    # The wire contract: Wirepipe-Sent-At arrived as sent_ns, and the consumer stamped received_ns.
    assert all(isinstance(s, int) for s in out.meta["sent_ns"])
    assert all(r >= s for s, r in zip(out.meta["sent_ns"], out.meta["received_ns"], strict=True))


async def test_headers_none_publishes_bare_payloads(nats_url: str) -> None:
    import nats

    opts = dict(url=nats_url)
    nc = await nats.connect(nats_url)
    got: list[Any] = []
    done = asyncio.Event()

    async def cb(msg: Any) -> None:
        got.append(msg)
        if len(got) == 10:
            done.set()

    await nc.subscribe("bare", cb=cb)
    await nc.flush()
    await Pipeline(GenerateSource("point", count=10), [Serialize("msgpack")],
                   NatsSink("bare", **opts, headers="none")).run_async()
    await asyncio.wait_for(done.wait(), 10)
    await nc.close()
    assert all(m.headers is None for m in got)
    # With headers: Content-Type and the publish time.
    import msgpack

    assert msgpack.unpackb(got[0].data) == expected("point", 1)[0]


async def test_wire_headers_and_subject_from_record_fields(nats_url: str) -> None:
    import nats

    nc = await nats.connect(nats_url)
    sub = await nc.subscribe("route.>")
    await nc.flush()
    await Pipeline(GenerateSource("point", count=5), [Subject("route.{x}.{seq}"), Serialize("json"),
                                                       Compress("zstd")],
                   NatsSink("{subject}", url=nats_url)).run_async()
    msgs = [await sub.next_msg(timeout=5) for _ in range(5)]
    await nc.close()
    points = expected("point", 5)
    assert [m.subject for m in msgs] == [f"route.{p['x']}.{i}" for i, p in enumerate(points)]
    h = msgs[0].headers
    assert h["Content-Type"] == "application/json" and h["Content-Encoding"] == "zstd"
    assert int(h[Header.SENT_AT]) > 1_600_000_000 * 10**9


async def test_queue_group_shares_messages(nats_url: str) -> None:
    n = 2000
    opts = dict(url=nats_url)
    sinks = [TestingSink(), TestingSink()]
    sources = [NatsSource("work", queue="workers", **opts, duration=30) for _ in sinks]
    pipes = [Pipeline(s, [Deserialize("msgpack")], k) for s, k in zip(sources, sinks, strict=True)]
    tasks = [asyncio.ensure_future(p.run_async()) for p in pipes]
    while not all(s.ready.is_set() for s in sources):
        await asyncio.sleep(0.01)
    await Pipeline(GenerateSource("point", count=n), [Serialize("msgpack")],
                   NatsSink("work", **opts)).run_async()
    for _ in range(1000):
        if sum(len(k.records) for k in sinks) >= n:
            break
        await asyncio.sleep(0.01)
    for s in sources:
        s.stopping.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    got = sinks[0].records + sinks[1].records
    assert len(got) == n  # each message to one member of the group, none twice
    assert sorted(got, key=lambda p: (p["x"], p["y"])) == sorted(expected("point", n), key=lambda p: (p["x"], p["y"]))


async def test_oversized_payload_is_refused_and_connection_stays_up(tmp_path: Any) -> None:
    with EmbeddedServer(max_payload=4096, store_dir=tmp_path / "js") as srv:
        opts = dict(url=srv.url)
        sink = NatsSink("big", **opts)
        dead = JsonlSink(tmp_path / "dead.jsonl")
        import nats

        nc = await nats.connect(srv.url)
        sub = await nc.subscribe("big")
        await nc.flush()
        # The payload alone is exactly max_payload: with headers it is over the limit.
        values = [b"a" * 4096, b"small", b"b" * 3900, b"c" * 4050]

        source = TestingSource(values, headers={Header.CONTENT_TYPE: "application/octet-stream"})
        stats = await Pipeline(source, [], sink, dead_letter=dead).run_async()
        assert stats.rejected == 2 and stats.records_out == 2
        got = [await sub.next_msg(timeout=5) for _ in range(2)]
        assert [m.data for m in got] == [b"small", b"b" * 3900]  # 3900 B + ~140 B of headers fit
        # The connection of the sink stayed up until its clean close, and a fresh publish still works.
        assert sink.conn.stats.disconnects == 0
        await nc.publish("big", b"after")
        assert (await sub.next_msg(timeout=5)).data == b"after"
        await nc.close()
        import json

        lines = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
        assert [d["stage"] for d in lines] == ["publish", "publish"]
        assert "max_payload 4096" in lines[0]["error"]


async def test_slow_consumer_drops_are_counted(nats_url: str, caplog: pytest.LogCaptureFixture) -> None:
    import nats

    from wirepipe.core.exit_codes import ExitCode, verdict
    from wirepipe.pipelines.monitor import run_summary, snapshot, status_line

    opts = dict(url=nats_url)
    source = NatsSource("flood", **opts, batch_size=10, pending_msgs_limit=20, duration=30)

    class SlowSink(TestingSink):
        async def write(self, batch: Batch) -> None:
            await super().write(batch)
            await asyncio.sleep(0.05)

    sink = SlowSink(keep=False)
    pipe = Pipeline(source, [], sink, queue_size=1)
    task = asyncio.ensure_future(pipe.run_async())
    while not source.ready.is_set():
        await asyncio.sleep(0.01)
    nc = await nats.connect(nats_url)
    for i in range(5000):
        await nc.publish("flood", str(i).encode())
    await nc.flush()
    await nc.close()
    most = 0
    for _ in range(300):
        most = max(most, source.lag() or 0)
        if source.dropped and sink.count + source.dropped + (source.lag() or 0) >= 5000:
            break
        await asyncio.sleep(0.02)
    source.stopping.set()
    assert most <= 20  # the client-side queue between nats-py and the pipeline is bounded by the pending limit
    stats = await asyncio.wait_for(task, 20)
    # Core NATS is at-most-once: what the pipeline could not keep up with was dropped and counted, and every
    # message is written, dropped past the pending limit, or received and discarded at the stop.
    assert source.dropped > 0 and source.conn.stats.slow_consumer_drops == source.dropped
    assert sink.count + source.dropped + source.discarded == 5000
    assert source.losses()["lost"] == source.dropped + source.discarded
    # ... reported as dropped and lost, never as read again, and a run that lost them exits 5
    snap = snapshot(pipe.last_run)
    assert (snap["dropped"], snap["reread"], snap["lost"]) == (source.dropped, 0, source.dropped + source.discarded)
    assert f"{source.dropped:,} dropped" in status_line("p", snap, None, 1.0) and "read again" not in run_summary(
        pipe.last_run, stats)
    assert [code for code, _ in verdict(stats.outcome())] == [ExitCode.LOST]
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slow consumer")]
    assert len(warned) == 1 and "they are lost: raise pending_msgs_limit or speed up the pipeline" in warned[0]


async def test_embedded_url_shares_one_server_between_pipelines() -> None:
    source = NatsSource("shared", count=100)  # no url: the process's embedded server
    sink = TestingSink()
    consumer = Pipeline(source, [Deserialize("msgpack")], sink)

    async def produce() -> None:
        await Pipeline(GenerateSource("point", count=100), [Serialize("msgpack")],
                       NatsSink("shared", url="embedded")).run_async()

    stats = await consume_while(source, consumer, produce)
    assert stats.records_out == 100
    assert EmbeddedServer._shared is None  # released and stopped when both pipelines ended


def test_core_connectors_take_their_validated_config() -> None:
    """Fields are declared once (the config models): Python construction validates exactly as YAML does."""
    from wirepipe.connectors.nats.core_sink import NatsSinkConfig
    from wirepipe.connectors.nats.core_source import NatsSourceConfig
    from wirepipe.core.errors import ConfigError

    for build, where in ((lambda: NatsSource("x", batch_size=0), "source.batch_size"),
                         (lambda: NatsSink("x", headers="some"), "sink.headers"),
                         (lambda: NatsSink("a b"), "sink.subject"), (lambda: NatsSource("x", no_such_field=1), "source")):
        with pytest.raises(ConfigError) as info:
            build()
        assert info.value.path == where
    source = NatsSource("pts.>", queue="w", batch_timeout="20ms", url="nats://127.0.0.1:4999")
    assert (source.config.batch_timeout, source.gaps, source.config.url) == (0.02, None, "nats://127.0.0.1:4999")
    yaml_built = NatsSourceConfig.model_validate({"type": "nats", "subject": "pts.>", "queue": "w",
                                                 "batch_timeout": "20ms", "url": "nats://127.0.0.1:4999"}).build()
    assert yaml_built.params == source.params and yaml_built.config == source.config
    sink = NatsSinkConfig.model_validate({"type": "nats", "subject": "out.{seq}", "flush_timeout": "2s"}).build()
    assert (sink.subject_template.fields, sink.config.flush_timeout, sink.config.headers) == (["seq"], 2.0, "wire")


def test_jetstream_connectors_take_their_validated_config() -> None:
    from wirepipe.connectors.nats.jetstream_sink import JetStreamSink, JetStreamSinkConfig
    from wirepipe.connectors.nats.jetstream_source import JetStreamSource, JetStreamSourceConfig
    from wirepipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^source: heartbeat must be less than half of expires"):
        JetStreamSource("x", heartbeat=20, expires=30)
    with pytest.raises(ConfigError, match=r"^sink\.window: Input should be greater than or equal to 1 \(got 0\)"):
        JetStreamSink("x", window=0)
    source = JetStreamSource(stream="S", durable="d", ack_wait="10s", ack="all")
    yaml_built = JetStreamSourceConfig.model_validate({"type": "jetstream", "stream": "S", "durable": "d",
                                                       "ack_wait": "10s", "ack": "all"}).build()
    assert (source.ack_wait, source.ack_mode) == (10.0, "all") and yaml_built.config == source.config
    sink = JetStreamSinkConfig.model_validate({"type": "jetstream", "subject": "o.{seq}", "stream": {"name": "O"},
                                               "msg_id": "{pipeline}-{seq}"}).build()
    config = sink.config
    assert (config.stream.name, config.msg_id, sink.subject_template.fields, config.retry.wait) == (
        "O", "{pipeline}-{seq}", ["seq"], 0.2)


@pytest.mark.parametrize("shape", ["one subject, shared headers", "a subject per record, headers per record",
                                   "a subject per record, no headers"])
async def test_a_batch_written_as_frames_arrives_as_nats_py_publishes_each_record(nats_url: str, shape: str) -> None:
    """The sink writes a batch into nats-py's buffer as protocol frames (``frames.py``): a subscriber gets each
    record exactly as nats-py's own ``publish`` of it delivers it (subject, payload, every header), plus the
    stamps: ``Wirepipe-Seq`` 1, 2, 3... across the powers of ten, one ``Wirepipe-Publisher``, a send time."""
    import nats

    n = 120  # the numbers cross 10 and 100: the header block grows by a digit inside one batch
    per_record = shape != "one subject, shared headers"
    subjects: list[str] | str = [f"eq.{i % 7}.ü" for i in range(n)] if per_record else "eq.one"
    values = [b"%d%%\r\n" % i * (i % 5) for i in range(n)]  # empty payloads too
    headers: Any = None
    if shape == "one subject, shared headers":
        headers = ODD_HEADERS
    elif shape == "a subject per record, headers per record":
        headers = [None if i % 3 == 0 else {**ODD_HEADERS, "X-I": str(i), Header.SEQ: "upstream"} for i in range(n)]

    nc = await nats.connect(nats_url)
    got: dict[str, list[Any]] = {"sink": [], "nats-py": []}
    sub = {"sink": await nc.subscribe("eq.>"), "nats-py": await nc.subscribe("ref.>")}
    await nc.flush()
    sink = NatsSink("{subject}" if per_record else "eq.one", url=nats_url, stamp_interval=0,
                    headers="none" if shape.endswith("no headers") else "wire")
    await Pipeline(TestingSource(values, batch_size=n, subjects=subjects, headers=headers), [], sink).run_async()
    for i, v in enumerate(values):
        h = headers[i] if isinstance(headers, list) else headers
        s = subjects[i] if isinstance(subjects, list) else subjects
        await nc.publish("ref" + s[2:], v, headers=dict(h) if h else None)
    for name in got:
        got[name] = [await sub[name].next_msg(timeout=5) for _ in range(n)]
    await nc.close()

    stamps = (Header.SEQ, Header.PUBLISHER, Header.SENT_AT)
    for mine, ref in zip(got["sink"], got["nats-py"], strict=True):
        assert ("ref" + mine.subject[2:], mine.data) == (ref.subject, ref.data)
        if shape.endswith("no headers"):
            assert mine.headers is None
            continue
        assert {k: v for k, v in mine.headers.items() if k not in stamps} == \
            {k: v for k, v in (ref.headers or {}).items() if k not in stamps}
    if not shape.endswith("no headers"):
        assert [int(m.headers[Header.SEQ]) for m in got["sink"]] == list(range(1, n + 1))
        assert {m.headers[Header.PUBLISHER] for m in got["sink"]} == {sink.stamp.id}
        assert all(int(m.headers[Header.SENT_AT]) > 1_600_000_000 * 10**9 for m in got["sink"])
    assert sink.records == n and sink.stamp.next == (n + 1 if not shape.endswith("no headers") else 1)


async def test_a_subscription_to_everything_reads_no_control_traffic(nats_url: str) -> None:
    """A source on ``>`` receives the system's subjects too: wirepipe's own (stamps, service endpoints), NATS's
    (service requests on $SRV, JetStream's API on $JS) and request replies (_INBOX): none is a record, each is
    counted by namespace, and the records around them all are (before: $SRV and _INBOX traffic came out as
    records, 3 of them for one `wirepipe ps`). A subscription that names a namespace reads it."""
    import nats

    source, explicit = NatsSource(">", url=nats_url, count=3), NatsSource("$SRV.>", url=nats_url, count=1)
    sink, services = TestingSink(), TestingSink()

    async def produce() -> None:
        nc = await nats.connect(nats_url)
        await nc.publish("data.a", b"1")
        await nc.publish("_WIREPIPE.last.data.a", b"", headers={Header.PUBLISHER: "p", Header.LAST_SEQ: "1"})
        await nc.publish("_WIREPIPE.service.some_pipe.abc.stats", b"")
        await nc.publish("$SRV.STATS", b"", reply="_INBOX.ps.1")
        await nc.publish("_INBOX.ps.1", b'{"type": "io.nats.micro.v1.stats_response"}')
        await nc.publish("$JS.API.INFO", b"")
        await nc.publish("data.b", b"2")
        await nc.publish("data.c", b"3")
        await nc.flush()
        await nc.close()

    async def both() -> None:
        reading = asyncio.ensure_future(Pipeline(explicit, [], services).run_async())
        while not explicit.ready.is_set():
            await asyncio.sleep(0.01)
        await produce()
        await asyncio.wait_for(reading, 10)

    stats = await consume_while(source, Pipeline(source, [], sink), both)
    assert (stats.records_in, stats.records_out) == (3, 3)
    assert sink.records == [b"1", b"2", b"3"]
    assert source.skipped == {"_WIREPIPE": 2, "$SRV": 1, "_INBOX": 1, "$JS": 1}
    assert source.losses()["skipped"] == 5 and source.losses()["lost"] == 0
    assert services.subjects == ["$SRV.STATS"] and explicit.skipped == {}
    from wirepipe.pipelines.monitor import loss_summary

    assert loss_summary(source.losses()).endswith(", 0 duplicates, 5 on system subjects skipped ($SRV, $JS, _INBOX "
                                                  "...: not records)")


def test_aiohttp_is_imported_only_when_a_websocket_connection_uses_it(tmp_path: Any) -> None:
    """nats-py imports aiohttp (its WebSocket transport) at import; wirepipe defers it (connectors/nats/
    deferred_aiohttp.py): a process that imports nats has not imported aiohttp, and a pipeline on a ws:// URL
    still publishes and reads through it (a real nats-server's WebSocket port)."""
    import json
    import subprocess
    import sys

    from tests.cli import cli_env
    from wirepipe.connectors.nats.server import ServerOptions, free_port

    ws = free_port()
    options = ServerOptions(jetstream=False, extra={"websocket": {"host": "127.0.0.1", "port": ws, "no_tls": True}})
    code = f"""
import asyncio, json, sys
import wirepipe.connectors.nats
import nats
before = "aiohttp" in sys.modules
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink

async def main():
    out = TestingSink()
    source = NatsSource("ws.points", url="ws://127.0.0.1:{ws}", count=50)
    reader = asyncio.ensure_future(Pipeline(source, [Deserialize("msgpack")], out).run_async())
    for _ in range(300):  # until the reader, subscribed at some point, has its 50
        await Pipeline(GenerateSource("point", count=50), [Serialize("msgpack")],
                       NatsSink("ws.points", url="ws://127.0.0.1:{ws}")).run_async()
        await asyncio.wait([reader], timeout=0.1)
        if reader.done():
            break
    await asyncio.wait_for(reader, 30)
    return out.records

records = asyncio.run(main())
print(json.dumps({{"before": before, "after": "aiohttp" in sys.modules, "records": len(records)}}))
"""
    with EmbeddedServer(options=options, store_dir=tmp_path / "js"):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=cli_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"before": False, "after": True, "records": 50}
