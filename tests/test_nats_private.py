"""The nats-py private attributes wirepipe relies on still exist (a nats-py upgrade that renames one fails here,
by name, instead of as a silent slowdown or an AttributeError deep in a run)."""

from __future__ import annotations

import asyncio
import importlib

import nats
from nats.js import api

from wirepipe.connectors.nats.headers import parse_header_column, parse_headers
from wirepipe.connectors.nats.reader import (
    NATS_PY_PRIVATE,
    RawSubscription,
    SubscriptionReader,
    queue_frames,
    send_queued,
)
from wirepipe.wire import Header, dead_letter_batch, dead_letter_payloads, template_fields


def _resolve(path: str) -> type:
    """``"nats.js.client.JetStreamContext.PushSubscription"`` -> the class (modules, then nested classes)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        assert isinstance(obj, type), path
        return obj
    raise AssertionError(f"cannot import {path}")


async def test_every_private_attribute_wirepipe_touches_exists_on_live_objects(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PRIV", subjects=["privjs.>"])
        core = await nc.subscribe("priv.core")
        push = await js.subscribe("privjs.>", stream="PRIV", ordered_consumer=True, config=api.ConsumerConfig())
        live = {
            "nats.aio.subscription.Subscription": core,
            "nats.js.client.JetStreamContext.PushSubscription": push,
            "nats.aio.client.Client": nc,
            "nats.protocol.parser.Parser": nc._ps,
            "nats.js.client.JetStreamContext._JSI": push._sub._jsi,
            "asyncio.Queue": asyncio.Queue(),
        }
        assert set(live) == set(NATS_PY_PRIVATE), "every class in NATS_PY_PRIVATE needs a live object here"
        missing = [f"{cls}.{attr}" for cls, attrs in NATS_PY_PRIVATE.items() for attr in attrs
                   if not hasattr(live[cls], attr)]
        assert not missing, (f"nats-py {nats.__version__ if hasattr(nats, '__version__') else ''} renamed or removed "
                             f"private attributes wirepipe uses: {missing}; update SubscriptionReader/publish_many/RawSubscription")
        for cls, obj in live.items():
            assert isinstance(obj, _resolve(cls)), cls

        # The reader takes a batch through them and keeps nats-py's public counters true.
        reader = SubscriptionReader(batch_size=10, batch_timeout=0.0, max_buffered=100)
        reader.attach(core)
        for i in range(5):
            await nc.publish("priv.core", b"x" * (i + 1))
        await nc.flush()
        for _ in range(200):
            if core.pending_msgs == 5:
                break
            await asyncio.sleep(0.01)
        assert core.pending_bytes == reader.pending_bytes == 15 and len(reader) == 5
        got = await reader.take(10, asyncio.Event())
        assert got is not None and [len(v) for v in got.data] == [1, 2, 3, 4, 5]
        assert reader.received == core.delivered == 5
        assert core.pending_msgs == len(reader) == 0 and core.pending_bytes == reader.pending_bytes == 0

        reader = SubscriptionReader(batch_size=10, batch_timeout=0.0, max_buffered=100)
        reader.attach(push)  # the wrapper: the reader reads the subscription nats-py feeds
        await js.publish("privjs.a", b"js")
        got = await asyncio.wait_for(reader.take(10, asyncio.Event()), 10)
        assert got is not None and got.data == [b"js"] and reader.received >= 1

        # A publishing sink's frames: taken into nats-py's outbound buffer as soon as queue_frames returns
        # (the sink counts them published then), counted as nats-py counts its publishes, sent by send_queued.
        frames = b"PUB priv.core 2\r\nab\r\nHPUB priv.core 24 27\r\nNATS/1.0\r\nK: v\r\nX: 1\r\n\r\ncde\r\n"
        out_msgs, before = nc.stats["out_msgs"], nc._pending_data_size
        queue_frames(nc, frames, 2, 5)
        assert nc._pending[-1] is frames and nc._pending_data_size == before + len(frames)
        assert nc.stats["out_msgs"] == out_msgs + 2
        await send_queued(nc)
        msgs = [await core.next_msg(timeout=5) for _ in range(2)]
        assert [(m.data, m.headers) for m in msgs] == [(b"ab", None), (b"cde", {"K": "v", "X": "1"})]
        nc._max_pending_size = len(frames)  # past nats-py's outbound limit: wait until the socket took it
        queue_frames(nc, frames * 2, 4, 10)
        await send_queued(nc)
        assert nc._pending_data_size == 0
        assert [(await core.next_msg(timeout=5)).data for _ in range(4)] == [b"ab", b"cde"] * 2
    finally:
        await nc.close()


async def test_raw_subscription_cuts_its_messages_out_of_any_read_as_nats_py_would(nats_url: str) -> None:
    """The parser's fast path for a raw subscription: messages split across reads anywhere (control line, headers,
    payload, the trailing CRLF), between another subscription's messages and a PING, each delivered once, in
    order, with the subject, reply, headers and payload nats-py's own parser gives; the other subscription and
    the PING still go through nats-py."""
    nc = await nats.connect(nats_url)
    try:
        raw_sub = await nc.subscribe("fast.raw")
        other = await nc.subscribe("fast.other")
        reader = RawSubscription(batch_size=100, batch_timeout=0.0, max_buffered=100)
        reader.attach(nc, raw_sub)
        assert "parse" in vars(nc._ps), "the fast path is installed on this connection's parser"
        raw_sid, other_sid = raw_sub._id, other._id
        hdr = b"NATS/1.0\r\nK: v\r\n\r\n"
        stream = b"".join([
            b"HMSG fast.raw %d _INBOX.r1 %d %d\r\n%bone\r\n" % (raw_sid, len(hdr), len(hdr) + 3, hdr),
            b"MSG fast.other %d 5\r\nother\r\n" % other_sid,
            b"MSG fast.raw %d 3\r\ntwo\r\n" % raw_sid,
            b"PING\r\n",
            b"HMSG fast.raw %d 12 12\r\nNATS/1.0\r\n\r\n\r\n" % raw_sid,  # headers only: an empty payload
            b"MSG fast.raw %d 5\r\nfour!\r\n" % raw_sid,
            b"HMSG fast.raw %d r.5 %d %d\r\n%bfive\r\n" % (raw_sid, len(hdr), len(hdr) + 4, hdr),
        ])
        for cut in (1, 7, 23, 64, len(stream)):  # every read size, so a message splits at every kind of place
            for i in range(0, len(stream), cut):
                await nc._ps.parse(stream[i:i + cut])
            assert not nc._ps.buf
            got = reader._drain(100)
            assert [(g[3], g[0], g[2], g[1]) for g in got] == [
                (b"fast.raw", b"_INBOX.r1", hdr, b"one"), (b"fast.raw", b"", None, b"two"),
                (b"fast.raw", b"", b"NATS/1.0\r\n\r\n", b""), (b"fast.raw", b"", None, b"four!"),
                (b"fast.raw", b"r.5", hdr, b"five")], cut
            assert (await other.next_msg(timeout=1)).data == b"other"
        assert reader.received == 5 * 5
        reader.detach()
        assert "parse" not in vars(nc._ps), "detached: nats-py's own parser again"
    finally:
        await nc.close()


async def test_raw_subscription_drops_what_a_read_brings_past_its_pending_limits_one_message_at_a_time(
        nats_url: str) -> None:
    """A read's messages are delivered together; past ``max_msgs`` or ``max_bytes`` each is looked at as nats-py
    would: the ones that fit are kept in order, the rest dropped and counted, once each."""
    nc = await nats.connect(nats_url)
    try:
        sub = await nc.subscribe("limits.raw")
        drops: list[int] = []
        reader = RawSubscription(batch_size=100, batch_timeout=0.0, max_buffered=100, max_msgs=3, max_bytes=10,
                                 on_drop=lambda: drops.append(1))
        reader.attach(nc, sub)
        sizes = [2, 2, 7, 3, 1, 1]  # the 7 passes max_bytes, the last one max_msgs
        await nc._ps.parse(b"".join(b"MSG limits.raw %d %d\r\n%b\r\n" % (sub._id, n, b"x" * n) for n in sizes))
        got = reader._drain(100)
        assert [len(g[1]) for g in got] == [2, 2, 3]
        assert reader.dropped == len(drops) == 3 and reader.received == 6 and reader.pending_bytes == 7
        reader.detach()
    finally:
        await nc.close()


def test_a_batchs_header_blocks_parse_as_each_alone() -> None:
    """``parse_header_column`` (a line seen before in the batch read once) gives what ``parse_headers`` gives for
    each block: repeated and unique lines, a status line, no headers, spaces around keys and values, a line
    without a colon, a key given twice, bytes that are not UTF-8."""
    blocks: list[bytes | None] = [
        b"NATS/1.0\r\nContent-Type: application/msgpack\r\nWirepipe-Sent-At: %d\r\nNats-Msg-Id: p-%d\r\n\r\n"
        % (1000 + i // 3, i) for i in range(7)]
    blocks += [None, b"", b"NATS/1.0 409 Batch Completed\r\n\r\n", b"NATS/1.0 100 Idle Heartbeat\r\nA: 1\r\n\r\n",
               b"NATS/1.0\r\nA:b\r\n c : d \r\nX\r\n\r\n", b"NATS/1.0\r\nK: \xe2\x82\r\nA: 1\r\nA: 2\r\n\r\n",
               b"NATS/1.0 \r\nA: 1\r\n\r\n", *blocks[:2]]
    assert parse_header_column(blocks) == [parse_headers(b) for b in blocks]
    assert parse_header_column(blocks)[0] == {"Content-Type": "application/msgpack", "Wirepipe-Sent-At": "1000",
                                              "Nats-Msg-Id": "p-0"}


def test_wire_module_is_the_one_header_vocabulary_and_dead_letter_encoding() -> None:
    from wirepipe.core.batch import Rejected

    assert Header.SENT_AT == "Wirepipe-Sent-At" and {Header.MSG_ID: 1}["Nats-Msg-Id"] == 1
    assert template_fields("orders.{region}.{seq}") == ["region", "seq"]
    for bad, why in (("a.{}", "empty {} placeholder"), ("a b", "whitespace"), ("a.{x", "subject template")):
        try:
            template_fields(bad)
        except ValueError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
    r = Rejected(value={"a": 1}, stage="serialize", operator="json", error="bad\nvalue", subject="s",
                 headers={"Wirepipe-Sent-At": "1"}, meta={"seq": 3, "stream_seq": 9})
    env = dead_letter_batch([r])
    assert env.values[0]["value_json"] == '{"a": 1}' and env.headers[0]["Wirepipe-Stage"] == "serialize"
    nats_dl = dead_letter_payloads([r])
    assert nats_dl.values == [b'{"a":1}']
    assert nats_dl.headers[0] == {"Content-Type": "application/json", "Wirepipe-Stage": "serialize",
                                  "Wirepipe-Error": "bad value", "Wirepipe-Subject": "s", "Wirepipe-Stream-Seq": "9"}
