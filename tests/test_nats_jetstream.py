"""JetStream connectors against a real nats-server: round trips, faults, dead letters, replay."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import msgpack
import pytest

from tests.nats_fixtures import ODD_HEADERS, consumer_info, expected, publish_numbered
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.jetstream_reader import consumer_sequences, parse_ack_replies, parse_ack_reply
from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
from wirepipe.connectors.nats.jetstream_source import BoundedEnd, JetStreamSource, JetStreamSourceConfig
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.connectors.null import NullSink
from wirepipe.core.batch import Batch
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSink, TestingSource
from wirepipe.wire import Header


async def publish(url: str, n: int, *, fmt: str = "msgpack", codec: str = "zstd", subject: str = "pts",
                  stream: str = "PTS", **kwargs: Any) -> JetStreamSink:
    sink = JetStreamSink(subject, url=url, stream={"name": stream, "subjects": [subject]},
                         **kwargs)
    await Pipeline(GenerateSource("point", count=n, batch_size=500), [Serialize(fmt), Compress(codec)], sink,
                   name="pub").run_async()
    return sink


async def stream_state(url: str, stream: str) -> Any:
    import nats

    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info(stream)).state
    finally:
        await nc.close()


@pytest.mark.parametrize(("fmt", "codec"), [("msgpack", "zstd"), ("json", "zlib"), ("msgpack-array", "lz4")])
async def test_jetstream_round_trip(nats_url: str, fmt: str, codec: str) -> None:
    n = 3000
    sink = await publish(nats_url, n, fmt=fmt, codec=codec)
    assert sink.acked == n and sink.republished == 0
    assert (await stream_state(nats_url, "PTS")).messages == n
    out = TestingSink()
    source = JetStreamSource("pts", durable="rt", url=nats_url, count=n, batch_size=400)
    stats = await Pipeline(source, [Decompress("auto"), Deserialize("auto", schema="point")], out).run_async()
    assert stats.records_out == n and stats.acked == n
    assert out.records == expected("point", n)
    assert out.meta["stream_seq"] == list(range(1, n + 1))
    assert all(isinstance(s, int) for s in out.meta["sent_ns"])
    # Everything written was acknowledged: nothing is pending on the durable consumer.
    import nats

    nc = await nats.connect(nats_url)
    info = await nc.jetstream().consumer_info("PTS", "rt")
    await nc.close()
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_msg_id_deduplicates_a_rerun(nats_url: str) -> None:
    await publish(nats_url, 500)
    sink = await publish(nats_url, 500)  # the same job again: same Nats-Msg-Id per record
    assert sink.duplicates == 500
    assert (await stream_state(nats_url, "PTS")).messages == 500


async def test_a_msg_id_repeated_within_a_batch_is_counted_and_said_once(nats_url: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """``msg_id: constant`` gives every record one id: the stream keeps 1 of 30, the summary says why."""
    from wirepipe.pipelines.monitor import run_summary

    sink = JetStreamSink("const", url=nats_url, stream={"name": "CONST", "subjects": ["const"]}, msg_id="constant")
    pipe = Pipeline(TestingSource([b"%d" % i for i in range(30)], batch_size=10), [], sink, name="const")
    with caplog.at_level("WARNING", logger="wirepipe"):
        stats = await pipe.run_async()
    assert (await stream_state(nats_url, "CONST")).messages == 1
    assert (stats.records_out, sink.deduplicated, sink.repeated_msg_ids) == (30, 29, 27)
    warned = [r.getMessage() for r in caplog.records if "Nats-Msg-Id of another record" in r.getMessage()]
    assert len(warned) == 1 and "msg_id 'constant' gave 9 of the 10 records of a batch" in warned[0], warned
    assert pipe.last_run is not None
    summary = run_summary(pipe.last_run, stats)
    assert ("30 records out of 30" in summary and "29 already stored (deduplicated), 27 given the "
            "Nats-Msg-Id of another record of their batch by the sink's msg_id" in summary)


@pytest.mark.slow
async def test_sigkill_of_the_server_mid_stream_loses_nothing(nats_server: EmbeddedServer) -> None:
    n = 20000
    url = nats_server.url
    opts = dict(url=url, reconnect={"wait": 0.05, "max_wait": 0.5})
    sink = JetStreamSink("fault", **opts, stream={"name": "FAULT"}, ack_timeout=1.0)
    publisher = Pipeline(GenerateSource("point", count=n, rate=8000, batch_size=200),
                         [Serialize("msgpack")], sink, name="fault-pub")
    out = TestingSink()
    source = JetStreamSource("fault", stream="FAULT", durable="fault-consumer", **opts, batch_size=500,
                             heartbeat=1.0, expires=5.0, ack_wait=5.0, duration=120)
    consumer = Pipeline(source, [Deserialize("msgpack")], out, flush_interval=0.2)
    pub_task = asyncio.ensure_future(publisher.run_async())
    while sink.acked < n // 4:
        await asyncio.sleep(0.01)
    cons_task = asyncio.ensure_future(consumer.run_async())
    await asyncio.sleep(0.3)
    await asyncio.to_thread(nats_server.kill)  # SIGKILL, mid-stream
    await asyncio.sleep(0.5)
    await asyncio.to_thread(nats_server.start)  # same port, same store
    pub_stats = await asyncio.wait_for(pub_task, 90)
    assert pub_stats.records_out == n
    assert sink.conn.stats.reconnects >= 1

    state = await stream_state(url, "FAULT")
    assert state.messages == n  # exactly N: retries carried the same Nats-Msg-Id

    for _ in range(3000):
        if len({s for s in out.meta.get("stream_seq", [])}) >= n:
            break
        await asyncio.sleep(0.02)
    source.stopping.set()
    await asyncio.wait_for(cons_task, 30)
    seqs = out.meta["stream_seq"]
    assert set(seqs) == set(range(1, n + 1))  # none missing
    duplicates = len(seqs) - len(set(seqs))  # redeliveries after the restart are counted, not lost
    assert duplicates >= 0
    assert sorted(out.records, key=lambda p: (p["x"], p["y"])) != []


async def test_poison_records_go_to_a_dead_letter_subject_and_are_terminated(nats_url: str) -> None:
    import nats

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(name="MIXED", subjects=["mixed"])
    good = [msgpack.packb({"x": i, "y": i}) for i in range(50)]
    poison = [b"\xc1 not msgpack", b"\x92\x01"]  # an invalid byte, a truncated array
    for i, payload in enumerate(good[:25] + poison + good[25:]):
        await js.publish("mixed", payload, headers={"Content-Type": "application/msgpack", "Nats-Msg-Id": str(i)})
    dlq = await nc.subscribe("dlq.>")
    await nc.flush()

    out = TestingSink()
    opts = dict(url=nats_url)
    source = JetStreamSource(stream="MIXED", durable="mixed", **opts, count=52, batch_size=10,
                             max_deliver=3)
    stats = await Pipeline(source, [Deserialize("auto")], out,
                           dead_letter=NatsSink("dlq.{subject}", **opts)).run_async()
    assert stats.rejected == 2 and stats.records_out == 50  # the pipeline carried on
    assert [v["x"] for v in out.records] == list(range(50))
    dead = [await dlq.next_msg(timeout=5) for _ in range(2)]
    assert [m.data for m in dead] == poison  # the original payloads
    assert all(m.subject == "dlq.mixed" for m in dead)
    assert dead[0].headers["Wirepipe-Stage"] == "deserialize"
    assert dead[0].headers["Wirepipe-Error"]
    assert dead[0].headers["Wirepipe-Stream-Seq"] == "26"
    info = await js.consumer_info("MIXED", "mixed")
    await nc.close()
    assert info.num_ack_pending == 0 and info.num_redelivered == 0  # terminated, not redelivered
    assert source.terminated == 2 and source.acked == 50


@pytest.mark.slow
async def test_a_failing_sink_holds_the_records_without_redelivery_and_resumes(nats_url: str) -> None:
    """A sink failure is not a record failure: no nak, no max_deliver, no dead letter; +WPI keeps them."""
    from wirepipe.pipelines.monitor import snapshot, status_line

    await publish(nats_url, 20, codec="none")

    class Flaky(TestingSink):
        """Fails while ``broken`` is set."""

        def __init__(self) -> None:
            super().__init__()
            self.broken = True
            self.failures = 0

        async def write(self, batch: Batch) -> None:
            if self.broken:
                self.failures += 1
                raise OSError(28, "No space left on device")
            await super().write(batch)

    opts = dict(url=nats_url)
    flaky = Flaky()
    dead = TestingSink()
    source = JetStreamSource("pts", durable="flaky", **opts, count=20, batch_size=20, max_deliver=2,
                             ack_wait=1.0)
    pipe = Pipeline(source, [Deserialize("msgpack")], flaky, dead_letter=dead)
    run = pipe.new_run()
    task = asyncio.ensure_future(run.execute())
    for _ in range(500):
        if flaky.failures >= 3:
            break
        await asyncio.sleep(0.02)
    snap = snapshot(run)
    assert "No space left on device" in snap["sink_error"]
    assert "sink unavailable: " in status_line("p", snap, None, 1.0)
    await asyncio.sleep(3.0)  # three times ack_wait: the held records must not come back
    flaky.broken = False
    stats = await asyncio.wait_for(task, 30)
    assert stats.sink_errors >= 3 and stats.rejected == 0 and not dead.rejects and not dead.records
    assert sorted(v["x"] for v in flaky.records) == sorted(p["x"] for p in expected("point", 20))
    assert run.sink_error is None and source.in_progress_sent >= 20
    info = await consumer_info(nats_url, "PTS", "flaky")
    assert info.num_redelivered == 0 and info.num_ack_pending == 0 and info.delivered.consumer_seq == 20


async def test_ordered_consumer_replays_from_a_sequence_and_a_time(nats_url: str) -> None:
    await publish(nats_url, 1000)
    opts = dict(url=nats_url)
    out = TestingSink()
    source = JetStreamSourceConfig(type="jetstream", subject="pts", **opts, ordered=True, deliver="by_start_sequence",
                                   start_seq=901, stop_at_end=True).build()
    stats = await Pipeline(source, [Decompress("zstd"), Deserialize("msgpack")], out).run_async()
    assert stats.records_out == 100
    assert out.meta["stream_seq"] == list(range(901, 1001))
    assert out.records == expected("point", 1000)[900:]

    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    source = JetStreamSourceConfig(type="jetstream", subject="pts", **opts, ordered=True, deliver="by_start_time",
                                   start_time=future, stop_at_end=True).build()
    assert (await Pipeline(source, [], NullSink()).run_async()).records_out == 0

    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    source = JetStreamSourceConfig(type="jetstream", subject="pts", **opts, ordered=True, deliver="by_start_time",
                                   start_time=past, stop_at_end=True).build()
    assert (await Pipeline(source, [], NullSink()).run_async()).records_out == 1000


async def test_ordered_consumer_reads_again_what_the_client_dropped(nats_url: str, monkeypatch: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A reader slower than the server fills nats-py's queue and nats-py drops the rest (a slow consumer), counting
    each as delivered: the ordered consumer never repairs that gap itself. The reader resets it past the last
    message it took, so every message is read once, in order (before: 60 of 1,000, exit 0). The slow-consumer
    warning says so and names what its user can do (it has no ``pending_msgs_limit`` to raise)."""
    from wirepipe.connectors.nats import jetstream_ordered

    monkeypatch.setattr(jetstream_ordered, "PENDING_MSGS", 20)  # 4 batches of 10 and 20: 60 held
    await publish(nats_url, 1000)
    source = JetStreamSourceConfig(type="jetstream", subject="pts", url=nats_url, ordered=True, deliver="all",
                                   batch_size=10, stop_at_end=True).build()
    await source.open()
    try:
        await asyncio.sleep(0.2)  # the server pushes all 1,000 (within its flow-control window) to a full queue
        seqs: list[int] = []
        async for batch in source.batches():
            seqs += batch.meta["stream_seq"]
    finally:
        await source.close()
    drops = source.conn.stats.slow_consumer_drops
    assert drops >= 940 and source.rereads >= 2
    assert seqs == list(range(1, 1001))
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slow consumer")]
    assert len(warned) == 1 and "pending_msgs_limit" not in warned[0]
    assert ("the ordered consumer reads them again from the stream, so none is lost; to avoid the re-reads, speed "
            "up the pipeline or read with a durable consumer (drop `ordered: true`)") in warned[0]
    # the first reset is said (before: one line per reset, 16 here), the others summed up once, at close
    rereads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ordered consumer")]
    assert rereads == [
        "ordered consumer of stream PTS: the client dropped messages (a slow consumer): reading again from stream "
        "sequence 61; none is lost (counted as reread, not dropped; later re-reads are summed up when the source "
        "closes)",
        f"ordered consumer of stream PTS: read the stream again {source.rereads} times, for {drops} message(s) the "
        "client dropped (none lost)"]


async def test_an_ordered_consumers_client_drops_are_reported_as_read_again_not_lost(nats_url: str,
                                                                                   monkeypatch: Any) -> None:
    """What the client dropped and the ordered consumer read again is ``reread`` in the status line, the summary
    and Prometheus, never ``dropped`` (which says lost) nor ``lost``: the run exits 0 (before: "7,624 dropped" in
    the status line and wirepipe_dropped_total, described as core NATS drops)."""
    from wirepipe.connectors.nats import jetstream_ordered
    from wirepipe.core.exit_codes import verdict
    from wirepipe.pipelines.monitor import run_summary, snapshot, status_line
    from wirepipe.pipelines.prometheus import COUNTER_DOCS, MetricsCollector

    class SlowFirst(TestingSink):  # the server pushes the stream while the first write waits: the client drops
        async def write(self, batch: Batch) -> None:
            if not self.batches:
                await asyncio.sleep(0.3)
            await super().write(batch)

    monkeypatch.setattr(jetstream_ordered, "PENDING_MSGS", 20)
    await publish(nats_url, 1000)
    source = JetStreamSourceConfig(type="jetstream", subject="pts", url=nats_url, ordered=True, deliver="all",
                                   batch_size=10, stop_at_end=True).build()
    sink = SlowFirst()
    pipe = Pipeline(source, [], sink, name="ordered")
    stats = await pipe.run_async()
    drops = source.conn.stats.slow_consumer_drops
    assert sink.meta["stream_seq"] == list(range(1, 1001)) and drops >= 940
    snap = snapshot(pipe.last_run)
    assert (snap["reread"], snap["dropped"], snap["lost"]) == (drops, 0, 0)
    assert snap["acked"] == 0 and stats.acked == 1000  # committed, but an ordered consumer takes no acks
    line = status_line("ordered", snap, None, 1.0)
    assert "acked" not in line
    assert f"{drops:,} dropped by the client and read again" in line and f"{drops:,} dropped," not in line
    assert run_summary(pipe.last_run, stats).splitlines()[0].endswith(
        f", 0 rejected, {drops} dropped by the client and read again from the stream (none lost)")
    exported = {f.name: (f.documentation, [s.value for s in f.samples])
                for f in MetricsCollector(lambda: [({"pipeline": "ordered"}, snap)]).collect()}
    assert exported["wirepipe_reread"] == (COUNTER_DOCS["reread"], [float(drops)])
    assert exported["wirepipe_dropped"][1] == [0.0] and exported["wirepipe_lost"][1] == [0.0]
    assert "none lost" in COUNTER_DOCS["reread"]
    assert verdict(stats.outcome()) == []  # exit 0


async def test_a_durables_client_drops_no_record_behind_a_slow_sink(nats_url: str) -> None:
    """A durable pull consumer holds only what its pull requests asked for (``batch_size`` messages, ``max_bytes``
    within half of ``pending_bytes_limit``), so a sink far slower than the server makes its client drop nothing: no
    slow-consumer drop, no redelivery, every record once, nothing ``dropped`` or ``lost``, exit 0. Should its
    connection drop anything (a reply, an advisory: never a record), the warning names what the source has to
    change and says that no record is among them (before: "JetStream delivers them again after ack_wait",
    naming no option of the source)."""
    from wirepipe.core.exit_codes import verdict
    from wirepipe.pipelines.monitor import snapshot

    class Slow(TestingSink):  # ~1,000 records/s against a server that sends tens of thousands
        async def write(self, batch: Batch) -> None:
            await asyncio.sleep(0.01)
            await super().write(batch)

    await publish(nats_url, 300)
    source = JetStreamSource("pts", durable="slow", url=nats_url, batch_size=10, stop_at_end=True,
                             pending_bytes_limit=1024)
    sink = Slow()
    pipe = Pipeline(source, [], sink, name="durable")
    stats = await pipe.run_async()
    assert sink.meta["stream_seq"] == list(range(1, 301))
    assert (source.conn.stats.slow_consumer_drops, source.buffer.dropped, source.redelivered) == (0, 0, 0)
    snap = snapshot(pipe.last_run)
    assert (snap["dropped"], snap["reread"], snap["lost"], snap["redelivered"], snap["acked"]) == (0, 0, 0, 0, 300)
    assert verdict(stats.outcome()) == []
    info = await consumer_info(nats_url, "PTS", "slow")
    assert (info.num_redelivered, info.num_ack_pending, info.delivered.consumer_seq) == (0, 0, 300)
    advice = source.conn.drop_advice
    assert "no record is among them" in advice
    named = [option for option in ("batch_size", "pending_bytes_limit") if f"`{option}`" in advice]
    assert named == ["batch_size", "pending_bytes_limit"]
    assert set(named) <= set(JetStreamSourceConfig.model_fields)


async def test_jetstream_relay_keeps_headers_and_sets_msg_ids(nats_url: str) -> None:
    await publish(nats_url, 300, fmt="json", codec="gzip")
    opts = dict(url=nats_url)
    relay_sink = JetStreamSink("relayed", **opts, stream={"name": "RELAYED"}, msg_id="relay-{stream_seq}")
    source = JetStreamSource("pts", durable="relay", **opts, count=300)
    await Pipeline(source, [Decompress("auto"), Deserialize("auto"), Serialize("msgpack"), Compress("zstd")],
                   relay_sink).run_async()
    import nats

    nc = await nats.connect(nats_url)
    msg = await nc.jetstream().get_msg("RELAYED", 1)
    await nc.close()
    assert msg.headers["Nats-Msg-Id"] == "relay-1"
    assert msg.headers["Content-Type"] == "application/msgpack" and msg.headers["Content-Encoding"] == "zstd"
    assert json.loads(json.dumps(expected("point", 1)[0])) == msgpack.unpackb(__import__("zstandard")
                                                                                .ZstdDecompressor()
                                                                                .decompress(msg.data))


@pytest.mark.parametrize("shape", ["one subject, shared headers", "a subject per record, headers per record",
                                   "one subject, no headers"])
async def test_a_batch_written_as_frames_is_stored_as_nats_py_publishes_each_record(nats_url: str, shape: str) -> None:
    """The JetStream sink writes a batch into nats-py's buffer as protocol frames, a window's worth at a time:
    the stream stores each record exactly as nats-py's own publish of it (subject, payload, every header, its
    Nats-Msg-Id), and every ack comes back to its record."""
    import nats

    n = 120
    per_record = shape.startswith("a subject per record")
    subjects: list[str] | str = [f"eq.{i % 7}.ü" for i in range(n)] if per_record else "eq.one"
    values = [b"%d%%\r\n" % i * (i % 5 + 1) for i in range(n)]
    headers: Any = ODD_HEADERS if shape == "one subject, shared headers" else None
    if per_record:
        headers = [None if i % 3 == 0 else {**ODD_HEADERS, "X-I": str(i), Header.MSG_ID: "upstream"}
                   for i in range(n)]
    sink = JetStreamSink("{subject}" if per_record else "eq.one", url=nats_url, window=50,
                         stream={"name": "EQ", "subjects": ["eq.>"]},
                         headers="none" if shape.endswith("no headers") else "wire")
    await Pipeline(TestingSource(values, batch_size=n, subjects=subjects, headers=headers), [], sink,
                   name="frames").run_async()
    assert (sink.acked, sink.republished, sink.unconfirmed) == (n, 0, 0)

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(name="REF", subjects=["ref.>"])
    mine = [await js.get_msg("EQ", seq) for seq in range(1, n + 1)]
    for i, (m, v) in enumerate(zip(mine, values, strict=True)):
        h = headers[i] if isinstance(headers, list) else headers
        await js.publish("ref" + m.subject[2:], v, headers={**(h or {}), Header.MSG_ID: m.headers[Header.MSG_ID]})
    refs = [await js.get_msg("REF", seq) for seq in range(1, n + 1)]
    await nc.close()

    for i, (m, ref) in enumerate(zip(mine, refs, strict=True)):
        s = subjects[i] if isinstance(subjects, list) else subjects
        assert (m.subject, m.data, "ref" + m.subject[2:]) == (s, values[i], ref.subject)
        assert {k: v for k, v in m.headers.items() if k != Header.SENT_AT} == ref.headers
        assert (Header.SENT_AT in m.headers) == (not shape.endswith("no headers"))
    assert len({m.headers[Header.MSG_ID] for m in mine}) == n


def test_the_raw_inbox_finds_the_nats_py_internals_it_replaces() -> None:
    """``connectors/nats/reader.py`` (RawSubscription) hooks ``Client._process_msg`` (called by the protocol parser for every
    message) and reads ``Subscription._id``; ``nats.publish_many`` calls ``_send_command`` and
    ``_flush_pending``: fail loudly if nats-py renames or reshapes them."""
    import inspect

    from nats.aio.client import Client
    from nats.aio.subscription import Subscription
    from nats.protocol.parser import Parser

    params = list(inspect.signature(Client._process_msg).parameters)
    assert params == ["self", "sid", "subject", "reply", "data", "headers"]
    assert "self.nc._process_msg(" in inspect.getsource(Parser.parse)
    assert "self._id = id" in inspect.getsource(Subscription.__init__)
    # nats.publish_many writes acks the way Client.publish does
    publish = inspect.getsource(Client.publish) + inspect.getsource(Client._send_publish)
    assert "await self._send_command(pub_cmd)" in publish and "await self._flush_pending()" in publish


def test_a_batchs_ack_replies_are_parsed_as_columns_in_either_form() -> None:
    """Stream sequence and delivery count of every reply, pending of the last: the v1 form, the v2 form (domain and
    account hash, a trailing token), and a batch mixing them, each as ``parse_ack_reply`` reads one reply."""
    v1 = [f"$JS.ACK.PTS.d.{1 + i % 2}.{10 + i}.{i + 1}.1733160000123456789.{99 - i}" for i in range(4)]
    v2 = [f"$JS.ACK.hub.ACCHASH.PTS.d.1.{20 + i}.{i + 1}.1733160000123456789.{50 - i}.tok" for i in range(3)]
    assert parse_ack_replies(v1) == ([10, 11, 12, 13], [1, 2, 1, 2], 96)
    assert parse_ack_replies(v2) == ([20, 21, 22], [1, 1, 1], 48)
    mixed = [v2[0], *v1[:2]]
    assert parse_ack_replies(mixed) == ([20, 10, 11], [1, 1, 2], 98)
    assert all(parse_ack_replies([r]) == ([parse_ack_reply(r)[0]], [parse_ack_reply(r)[1]], parse_ack_reply(r)[2])
               for r in [*v1, *v2])
    assert parse_ack_replies([]) == ([], [], 0)
    assert consumer_sequences([v2[0], *v1[:2]]) == ([20, 10, 11], [1, 1, 2])  # stream and consumer sequences


@pytest.mark.parametrize("ack", ["explicit", "all"])
async def test_ack_modes_settle_every_record_once_written(nats_url: str, ack: str) -> None:
    import nats
    from nats.js import api

    n = 3000
    await publish(nats_url, n)
    out = TestingSink()
    source = JetStreamSource("pts", durable=f"modes-{ack}", url=nats_url, count=n,
                             batch_size=250, ack=ack)
    stats = await Pipeline(source, [Decompress("auto"), Deserialize("auto")], out).run_async()
    assert stats.records_out == n and stats.acked == n
    assert out.records == expected("point", n)
    nc = await nats.connect(nats_url)
    info = await nc.jetstream().consumer_info("PTS", f"modes-{ack}")
    await nc.close()
    assert info.config.ack_policy == (api.AckPolicy.ALL if ack == "all" else api.AckPolicy.EXPLICIT)
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_ack_all_through_a_sink_outage_acks_every_record_once_written(nats_url: str) -> None:
    """A failed write is retried in place (held with +WPI); with AckAll an ack of a later batch would
    ack the held one too, so none may go out before it is written: all records end written once."""
    import nats

    n = 2000
    await publish(nats_url, n)

    class FailOnce(TestingSink):
        failed = False

        async def write(self, batch: Batch) -> None:
            if not self.failed and batch.meta["stream_seq"][0] > 200:
                self.failed = True
                raise OSError("disk full (once)")
            await super().write(batch)

    out = FailOnce()
    source = JetStreamSource("pts", durable="ackall-nak", url=nats_url, count=n,
                             batch_size=100, ack="all", ack_wait=60)
    stats = await Pipeline(source, [Decompress("auto"), Deserialize("auto")], out, flush_interval=0.05).run_async()
    assert out.failed and stats.sink_errors > 0
    assert sorted(out.meta["stream_seq"]) == list(range(1, n + 1))  # every record written exactly once
    nc = await nats.connect(nats_url)
    info = await nc.jetstream().consumer_info("PTS", "ackall-nak")
    await nc.close()
    assert info.num_ack_pending == 0 and info.num_pending == 0


# --- a stream that cannot store now: BackOff, never the dead letter -----------------------------------------


async def _wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.timeout(120)
@pytest.mark.slow
async def test_a_full_stream_backs_off_and_every_record_lands_once(nats_url: str) -> None:
    """A `discard: new` stream at max_msgs answers each publish "maximum messages exceeded" (503, err_code 10077):
    the sink raises BackOff, the run loop waits and keeps the records unacknowledged upstream (no redelivery, no
    dead letter); a worker on the WorkQueue stream frees room, and every record lands exactly once."""
    import nats
    from nats.js.api import DiscardPolicy, RetentionPolicy, StreamConfig

    from tests.nats_fixtures import publish_numbered

    n = 400
    await publish_numbered(nats_url, n, stream="IN", subject="in")
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="OUT", subjects=["out"], max_msgs=50, discard=DiscardPolicy.NEW,
                                     retention=RetentionPolicy.WORK_QUEUE))
    dead = TestingSink()
    source = JetStreamSource(stream="IN", durable="relay", url=nats_url, count=n, batch_size=100, ack_wait=2.0)
    sink = JetStreamSink("out", url=nats_url, window=64, retry={"wait": 0.05, "max_wait": 0.3})
    pipe = Pipeline(source, [], sink, dead_letter=dead, name="relay", flush_interval=0.1)
    run = pipe.new_run()
    task = asyncio.ensure_future(run.execute())
    try:
        await _wait_until(lambda: run.sink_error and "maximum messages exceeded" in run.sink_error, 30,
                          "the sink to back off")
        assert "err_code 10077" in (run.sink_error or "") and sink.unconfirmed > 0
        assert (await js.stream_info("OUT")).state.messages == 50  # full: nothing past max_msgs is stored
        await asyncio.sleep(2.5)  # longer than ack_wait: what the sink holds must not come back upstream
        held_errors = pipe.stats.sink_errors
        assert held_errors >= 2 and not task.done()
        # Room comes: a worker takes (and acks) what the WorkQueue stream stores, which removes it.
        drain = await js.pull_subscribe("out", durable="drain", stream="OUT")
        got: list[int] = []
        deadline = asyncio.get_running_loop().time() + 60
        while len(got) < n and asyncio.get_running_loop().time() < deadline:
            try:
                msgs = await drain.fetch(50, timeout=1)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                got.append(msgpack.unpackb(m.data)["i"])
                await m.ack()
        stats = await asyncio.wait_for(task, 60)
        with pytest.raises(nats.errors.TimeoutError):  # and nothing after: no record stored twice
            await drain.fetch(1, timeout=1)
        assert sorted(got) == list(range(n))  # every record, exactly once
        assert stats.sink_errors >= held_errors and stats.rejected == 0 and not dead.rejects and not dead.records
        assert stats.records_out == n and stats.acked == n and run.sink_error is None and sink.unconfirmed == 0
        info = await js.consumer_info("IN", "relay")
        assert info.num_ack_pending == 0 and info.num_pending == 0 and info.num_redelivered == 0
    finally:
        if not task.done():
            task.cancel()
        await nc.close()


@pytest.mark.timeout(60)
async def test_the_sinks_stream_block_sets_the_discard_policy(nats_url: str) -> None:
    """`stream: {discard: new}` makes the created stream refuse at its limits (the sink then backs off, above);
    without it the stream keeps NATS's default, discard old."""
    import nats
    from nats.js.api import DiscardPolicy

    from wirepipe.testing import TestingSource

    for name, discard in (("PUSHBACK", "new"), ("RETAIN", None)):
        block = {"name": name, "subjects": [name.lower()], "max_msgs": 5, **({"discard": discard} if discard else {})}
        sink = JetStreamSink(name.lower(), url=nats_url, stream=block)
        await Pipeline(TestingSource([b"x"] * 3, batch_size=3), [], sink).run_async()
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        assert (await js.stream_info("PUSHBACK")).config.discard == DiscardPolicy.NEW
        assert (await js.stream_info("RETAIN")).config.discard == DiscardPolicy.OLD
    finally:
        await nc.close()


@pytest.mark.timeout(60)
async def test_a_record_larger_than_the_stream_is_dead_lettered_not_waited_for(nats_url: str) -> None:
    """No room will ever come for a record larger than max_bytes: it is the record's problem (dead-lettered with
    why); the records around it are stored, and the run ends."""
    import nats
    from nats.js.api import DiscardPolicy, StreamConfig

    from wirepipe.testing import TestingSource

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="SMALL", subjects=["small"], max_bytes=2000, discard=DiscardPolicy.NEW))
    dead = TestingSink()
    values = [b"a" * 10, b"x" * 5000, b"b" * 10]
    stats = await Pipeline(TestingSource(values, batch_size=3), [], JetStreamSink("small", url=nats_url),
                           dead_letter=dead).run_async()
    state = (await js.stream_info("SMALL")).state
    await nc.close()
    assert state.messages == 2 and stats.rejected == 1 and stats.sink_errors == 0  # no wait for room
    (letter,) = dead.rejects
    assert letter.value == b"x" * 5000 and "maximum bytes exceeded" in letter.error
    assert "can never fit in stream SMALL (max_bytes 2,000)" in letter.error


async def test_a_relay_keeps_the_headers_records_came_with_through_serialize(nats_url: str) -> None:
    """A trace header on the messages a JetStream source reads reaches the stream the sink publishes to, past
    decode and re-encode (serialize once replaced the headers); the stale Content-Encoding does not."""
    import nats

    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await js.add_stream(name="TRACED", subjects=["traced"])
    for i in range(5):
        await js.publish("traced", Compress("gzip")(Serialize("json")(Batch([{"i": i}]))).values[0],
                         headers={"traceparent": f"00-{i:032x}-{i:016x}-01", "Content-Type": "application/json",
                                  "Content-Encoding": "gzip"})
    sink = JetStreamSink("relayed", url=nats_url, stream={"name": "RELAYED2"})
    source = JetStreamSource(stream="TRACED", durable="tracer", url=nats_url, count=5)
    await Pipeline(source, [Decompress("auto"), Deserialize("auto"), Serialize("msgpack")], sink).run_async()
    msgs = [await js.get_msg("RELAYED2", seq) for seq in range(1, 6)]
    await nc.close()
    assert [m.headers["traceparent"] for m in msgs] == [f"00-{i:032x}-{i:016x}-01" for i in range(5)]
    assert all(m.headers["Content-Type"] == "application/msgpack" and "Content-Encoding" not in m.headers
               for m in msgs)
    assert [msgpack.unpackb(m.data) for m in msgs] == [{"i": i} for i in range(5)]


@pytest.mark.parametrize("ack", ["explicit", "all"])
async def test_a_count_stops_after_n_and_the_server_has_its_acks_when_the_run_returns(nats_url: str,
                                                                                     ack: str) -> None:
    """``count`` means "stop after N": the run reads 300 of 1,000, commits them at once (the flush interval is an
    hour: the source asks for the commit), and returns only once the server has applied every ack: a look at
    the consumer right after it finds the 300 acknowledged and nothing held."""
    await publish_numbered(nats_url, 1000)
    source = JetStreamSource(stream="NUM", durable=f"counted-{ack}", url=nats_url, count=300, batch_size=70,
                             ack=ack)
    sink = TestingSink()
    stats = await asyncio.wait_for(Pipeline(source, [Deserialize("msgpack")], sink, flush_interval=3600).run_async(),
                                   30)
    info = await consumer_info(nats_url, "NUM", f"counted-{ack}")
    assert [r["i"] for r in sink.records] == list(range(300))
    assert (stats.records_out, stats.acked, stats.outstanding) == (300, 300, 0)
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (300, 0, 700)


async def test_readers_of_one_durable_read_to_its_end_without_waiting_on_each_other(
        nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three workers of a pool on one durable with ``stop_at_end``, committing only when the source asks (the
    flush interval is an hour). Each ends once nothing is pending or unacknowledged; what a worker was given and
    has not acknowledged is its own, settled before it looks, so none waits on another's records for ever and
    none counts them as outstanding: every record once, nothing left on the server."""
    import wirepipe.connectors.nats.jetstream_source as jetstream_source
    from wirepipe.core.workers import Worker

    monkeypatch.setattr(jetstream_source, "LAG_REFRESH", 0.2)  # how soon an idle reader looks at the consumer
    await publish_numbered(nats_url, 1500)
    sinks, pipes = [], []
    for index in range(3):
        for name, value in Worker(index, 3).environment("pool").items():
            monkeypatch.setenv(name, value)
        source = JetStreamSource(stream="NUM", durable="to-the-end", url=nats_url, batch_size=50, ack_wait=60,
                                 stop_at_end=True)
        sinks.append(TestingSink())
        pipes.append(Pipeline(source, [Deserialize("msgpack")], sinks[-1], flush_interval=3600))
    runs = await asyncio.wait_for(asyncio.gather(*(pipe.run_async() for pipe in pipes)), 60)
    assert sorted(r["i"] for sink in sinks for r in sink.records) == list(range(1500))
    assert [stats.outstanding for stats in runs] == [0, 0, 0]
    assert sum(stats.acked for stats in runs) == 1500
    info = await consumer_info(nats_url, "NUM", "to-the-end")
    assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, 1500)


def test_a_bounded_end_waits_while_records_held_elsewhere_change_and_ack_wait_past_their_last_change() -> None:
    end = BoundedEnd(patience=10)
    assert not end.reached(pending=5, ack_pending=0, now=0.0) and not end.waiting  # more to read
    assert not end.reached(0, 40, now=1.0) and (end.waiting, end.outstanding) == (True, 40)
    assert not end.reached(0, 30, now=9.0)  # they are being acknowledged (or come back): the wait goes on
    assert not end.reached(0, 30, now=18.0)
    assert end.reached(0, 30, now=19.0) and end.outstanding == 30  # ack_wait without a change: incomplete
    assert not end.reached(3, 30, now=20.0) and not end.waiting and end.outstanding == 0  # new records: read on
    assert end.reached(0, 0, now=21.0) and end.outstanding == 0
