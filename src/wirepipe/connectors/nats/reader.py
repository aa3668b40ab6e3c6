"""Reading a NATS subscription a batch at a time: the one module that touches nats-py's private attributes.

Two readers with one interface (``take``, ``received``, ``delivered``, ``len``, replies):
``RawSubscription`` takes one subscription's messages as raw protocol tuples (the core NATS
source, the JetStream pull inbox), and ``SubscriptionReader`` empties a nats-py
subscription's pending queue (the ordered JetStream consumer, which nats-py itself must see
to keep it ordered). ``publish_many`` writes many protocol lines (acks) at once,
``queue_frames`` and ``send_queued`` a publishing sink's batch of frames (``frames.py``).
nats-py has no public way to do any of these without a coroutine or an object per message,
so they reach into its internals; ``NATS_PY_PRIVATE`` lists every private attribute used,
and tests/test_nats_private.py fails by name when a nats-py release renames one. Public
accessors (``Subscription.delivered``, ``pending_msgs``, ``pending_bytes``) are used where they exist.

``RawSubscription``: no nats-py ``Msg``, header dict or queue per message. nats-py's own delivery
(its header parser, a ``Msg`` object, an ``asyncio.Queue`` put and get) cost ~12.5 us/message of the
~16 us/record a whole JetStream pull pipeline took (client CPU, same run, 2 shared cores); its header
parser alone ~6x ``parse_headers``. Here the messages of this one subscription are cut out of nats-py's
parser buffer by a fast path of its ``parse`` (``_frames_parser``: a read's messages cut in one C loop,
``cut_frames``, and handed over together, no coroutine) and, where nats-py's parser still frames one (after a PING
or another subscription's message in the same read), by its ``_process_msg`` hook; both append
``(reply, data, raw headers, subject)`` to a deque, applying the subscription's pending limits as nats-py would;
headers are parsed a batch at a time (``parse_header_column``, a C loop too).

It replaces two nats-py internals (``Client._process_msg``, called by ``nats.protocol.parser.Parser`` for every
message, and that parser's ``parse``, on the connection's own parser object) for that subscription only (found by
``Subscription._id``); every other subscription goes through nats-py unchanged.
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from ...core.batch import Batch
from ...wire import sent_at_column
from .headers import has_status, parse_header_column, parse_headers


class Received:
    """Messages taken from a subscription by a reader, as columns."""

    __slots__ = ("data", "headers", "replies", "subjects", "times")

    def __init__(self, data: list[bytes], subjects: list[str], headers: list[Any], replies: list[str],
                 times: list[int]) -> None:
        self.data = data
        self.subjects = subjects
        self.headers = headers
        self.replies = replies
        self.times = times

    def __len__(self) -> int:
        return len(self.data)

    def batch(self) -> Batch:
        """Payloads, subjects, headers, ``sent_ns`` (from Wirepipe-Sent-At) and ``received_ns``."""
        headers = self.headers
        has_headers = any(headers)
        return Batch(
            self.data,
            subjects=self.subjects,
            headers=headers if has_headers else None,
            meta={"sent_ns": sent_at_column(headers) if has_headers else [None] * len(headers),
                  "received_ns": self.times},
        )


# The private attributes of nats-py wirepipe relies on, per class (tests/test_nats_private.py checks them).
NATS_PY_PRIVATE: dict[str, tuple[str, ...]] = {
    "nats.aio.subscription.Subscription": ("_pending_queue", "_pending_size", "_id", "_jsi"),
    "nats.js.client.JetStreamContext._JSI": ("reset_ordered_consumer",),  # OrderedJetStreamSource._read_again
    "nats.js.client.JetStreamContext.PushSubscription": ("_sub",),
    "nats.aio.client.Client": ("_send_command", "_flush_queue", "_flush_pending", "_process_msg", "_pending",
                               "_pending_data_size", "_max_pending_size", "_ps"),
    "nats.protocol.parser.Parser": ("buf", "state"),
    "asyncio.Queue": ("_queue",),
}


class SubscriptionReader:
    """Reads a nats-py subscription's pending queue a batch at a time.

    The subscription has no callback: nats-py parses each message into its pending queue
    (bounded by ``pending_msgs_limit``; past it, core NATS drops are counted), and ``take``
    empties up to a batch of it with ``get_nowait`` in one loop. That skips the
    per-message coroutine of a callback subscription (measured: a bare drain loop beat a
    callback loop doing the same decoding by ~5-10%, and the JetStream pull source got
    ~40% faster than with a callback appending to a list) and keeps no ``Msg`` objects
    beyond the batch. ``received_ns`` is when the pipeline took the message.
    ``status`` (JetStream pulls) sees and removes the server's status messages.

    nats-py has no public way to take a batch from a subscription without a coroutine per
    message, so this class is the one place that touches a ``Subscription``'s private
    attributes (``NATS_PY_PRIVATE`` lists them; tests/test_nats_private.py fails loudly when
    a nats-py release renames one). Everything readable publicly (``delivered``) is read so.
    """

    def __init__(self, batch_size: int, batch_timeout: float, max_buffered: int,
                 status: Any = None) -> None:
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.max_buffered = max(max_buffered, batch_size)
        self.status = status
        self.sub: Any = None
        self.queue: asyncio.Queue[Any] | None = None
        self.delivered = 0
        self._in_hand: list[Any] = []  # taken by a ``take`` still waiting for its batch to fill

    def attach(self, sub: Any) -> None:
        """Read ``sub``: a core ``Subscription``, or a JetStream push wrapper (nats-py feeds the
        subscription it wraps; the wrapper holds copies of its fields)."""
        from nats.aio.subscription import Subscription

        if not isinstance(sub, Subscription):
            sub = sub._sub
        self.sub = sub
        self.queue = sub._pending_queue  # nats-py keeps it there for next_msg()/messages

    @property
    def received(self) -> int:
        """Messages of any kind nats-py has put in the subscription's queue so far (0 before ``attach``)."""
        return self.sub.delivered if self.sub is not None else 0

    def __len__(self) -> int:
        return self.sub.pending_msgs if self.sub is not None else 0

    @property
    def pending_bytes(self) -> int:
        """Payload bytes waiting in the subscription (nats-py's public count; ``take`` keeps it true)."""
        return self.sub.pending_bytes if self.sub is not None else 0

    async def _first(self, stopping: asyncio.Event) -> Any:
        """Wait for one message (None when ``stopping`` is set first)."""
        q = self.queue
        assert q is not None
        while True:
            if not q.empty():
                return q.get_nowait()
            if stopping.is_set():
                return None
            getter = asyncio.ensure_future(q.get())
            stopper = asyncio.ensure_future(stopping.wait())
            try:
                await asyncio.wait({getter, stopper}, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                return getter.result()

    def _drain(self, into: list[Any], want: int) -> None:
        q = self.queue
        assert q is not None
        get = q.get_nowait
        status = self.status
        while len(into) < want and not q.empty():
            msg = get()
            q.task_done()
            if status is not None and msg.headers is not None and not msg.data and "Status" in msg.headers:
                status(msg.headers)
                continue
            into.append(msg)

    async def take(self, limit: int, stopping: asyncio.Event) -> Received | None:
        """Up to ``limit`` messages: waits for the first, then up to ``batch_timeout`` for a full batch."""
        want = min(limit, self.batch_size)
        msgs: list[Any] = []
        self._in_hand = msgs  # a take cancelled while it waits leaves them for ``drop_messages``
        while not msgs:
            first = await self._first(stopping)
            if first is None:
                return None
            assert self.queue is not None
            self.queue.task_done()
            if self.status is not None and first.headers is not None and not first.data and "Status" in first.headers:
                self.status(first.headers)
                continue
            msgs.append(first)
        times = [time.time_ns()]
        self._drain(msgs, want)
        if len(msgs) < want and self.batch_timeout > 0 and not stopping.is_set():
            await asyncio.sleep(self.batch_timeout)
            self._drain(msgs, want)
        now = time.time_ns()
        times += [now] * (len(msgs) - 1)  # received: when taken from the client's queue
        self._in_hand = []
        data = [m.data for m in msgs]
        self.sub._pending_size -= sum(map(len, data))  # as next_msg() does: pending_bytes stays true
        self.delivered += len(msgs)
        return Received(data, [m.subject for m in msgs], [m.headers for m in msgs], [m.reply for m in msgs], times)

    def waiting_replies(self) -> list[str]:
        """Reply subjects of the messages waiting in the queue (left in it)."""
        queue = self.queue
        return [m.reply for m in getattr(queue, "_queue", ()) if m.reply] if queue is not None else []

    def drop_replies(self) -> list[str]:
        """Empty the queue; the reply subjects of what it held (to give JetStream messages back)."""
        return [m.reply for m in self.drop_messages()]

    def drop_messages(self) -> list[Any]:
        """Empty the queue: the messages it held (and those a cancelled ``take`` had in hand, first)."""
        msgs, self._in_hand = self._in_hand, []
        if self.queue is not None:
            self._drain(msgs, 1 << 62)
        return msgs


async def reset_ordered_consumer(sub: Any, start_seq: int) -> None:
    """nats-py's ordered consumer behind ``sub`` (a JetStream push subscription) starts again at ``start_seq``: the
    old consumer's delivery subject is unsubscribed before the first pause (nothing of it is queued after), then
    a new consumer is created."""
    await sub._sub._jsi.reset_ordered_consumer(start_seq)


async def publish_many(nc: Any, subjects: Sequence[str | None], body: bytes) -> int:
    """One ``body`` to each subject, as one write of protocol lines (JetStream acks, naks).

    ``nc.publish`` costs a few microseconds of Python per message; acknowledging a batch
    one message at a time cost about as much as receiving it. Here each ack is one
    ``PUB <reply> <n>`` line joined into a single command for nats-py's outbound buffer
    (``_send_command`` and ``_flush_pending``, as ``publish`` calls them; kept here). While disconnected, the ordinary
    ``publish`` path is used so nats-py's outbound limits and errors apply. Returns how
    many were sent (``None`` entries, e.g. records unpacked from one message, are skipped).
    """
    targets = [s for s in subjects if s]
    if not targets:
        return 0
    if not nc.is_connected:
        for s in targets:
            await nc.publish(s, body)
        return len(targets)
    tail = f" {len(body)}\r\n{body.decode()}\r\n"
    await nc._send_command(("PUB " + (tail + "PUB ").join(targets) + tail).encode())
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()  # kick nats-py's flusher, as its publish does: nothing else may publish soon
    return len(targets)


def can_queue(nc: Any) -> bool:
    """nats-py takes frames into its outbound buffer now: connected, not draining (otherwise its own
    ``publish`` applies its limits and errors: the reconnect buffer's size, a closed connection)."""
    return bool(nc.is_connected and not nc.is_draining)


def queue_frames(nc: Any, frames: bytes, messages: int, payload_bytes: int) -> None:
    """Put ``frames`` (whole ``PUB``/``HPUB`` frames) into nats-py's outbound buffer as one command.

    Synchronous, so the caller knows the frames are taken once it returns: what ``_send_command`` does before
    its first ``await``, and ``publish``'s counters (``stats``) for the messages. Only while ``can_queue``.
    ``send_queued`` then sends them on.
    """
    nc._pending.append(frames)
    nc._pending_data_size += len(frames)
    stats = nc.stats
    stats["out_msgs"] += messages
    stats["out_bytes"] += payload_bytes


async def send_queued(nc: Any) -> None:
    """What nats-py's ``publish`` does after queueing a command: past its outbound limit (``pending_size``)
    wait for the socket to take the buffer, else kick its flusher if nothing asked it yet."""
    if 0 < nc._max_pending_size < nc._pending_data_size:
        await nc._flush_pending(force_flush=True)
    elif nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()


_PAYLOAD = operator.itemgetter(1)


# A message cut out of the parser's buffer: (reply, payload, raw header block or None, subject).
Frame = tuple[bytes, bytes, bytes | None, bytes]


def _cut_frames_python(buf: bytearray, own: bytes) -> tuple[list[Frame], int, int, bool]:
    """``wirepipe._frames.cut_frames`` in Python (built without a compiler): the messages of subscription ``own``
    wholly at the start of ``buf``, how far they reach, their payload bytes, and whether the next is one of
    ``own`` not all read yet. A message still arriving (a large payload over many reads) is not copied until it
    is whole; then the frames are slices of one copy of the buffer."""
    pos, end, partial = 0, len(buf), False
    frames: list[Frame] = []
    add = frames.append
    payload_bytes = 0
    src = cast(bytes, buf)  # read in place until a read has a whole message, then as one copy (cut: bytes)
    while pos < end:
        nl = src.find(b"\r\n", pos)
        if nl < 0:
            break
        parts = src[pos:nl].split(b" ")
        n = len(parts)
        if parts[0] == b"HMSG" and (n == 6 or n == 5) and parts[-2].isdigit() and parts[-1].isdigit():
            header_size, total, replied = int(parts[-2]), int(parts[-1]), n == 6
        elif parts[0] == b"MSG" and (n == 5 or n == 4) and parts[-1].isdigit():
            header_size, total, replied = 0, int(parts[-1]), n == 5
        else:
            break
        if parts[2] != own or header_size > total or b"" in parts:
            break
        start = nl + 2
        stop = start + total
        if stop + 2 > end:
            partial = True  # its rest comes with the next read: the fast path takes it then
            break
        if src is buf:
            src = bytes(buf)
            parts = src[pos:nl].split(b" ")
        body = start + header_size
        add((parts[3] if replied else b"", src[body:stop], src[start:body] if header_size else None, parts[1]))
        payload_bytes += stop - body
        pos = stop + 2
    return frames, pos, payload_bytes, partial


try:
    from ..._frames import cut_frames
except ImportError:  # built without a compiler (the extension is optional): the Python loop
    cut_frames = _cut_frames_python  # type: ignore[assignment]


def _frames_parser(parser: Any, parse: Callable[[bytes], Awaitable[None]], sid: int,
                   deliver: Callable[[list[Frame], int], None]) -> Callable[[bytes], Awaitable[None]]:
    """nats-py's ``Parser.parse`` with a fast path for one subscription's messages.

    Each message of ``sid`` wholly in the buffer is cut out (``cut_frames``: its control line split at its
    spaces, as nats-server writes it, ``HMSG subject sid [reply] header-size total-size``,
    ``MSG subject sid [reply] size``, sizes in digits; one C loop, ``wirepipe._frames``, or the same in Python); a
    read's messages go to ``deliver`` together, without a coroutine; the buffer is cut once per read. nats-py's
    parser tries two regexes, fills a dict of the message's arguments, cuts the buffer twice and awaits
    ``_process_msg``, per message (~2 us, a third of a JetStream pull consumer's CPU). Anything else (another
    subscription's message, PING, INFO, -ERR, a control line of any other form, the parser midway through a
    message) and everything after it in the buffer goes to nats-py's ``parse``, as before; a message of ``sid``
    not all read yet waits in the buffer for the next read.
    """
    from nats.protocol.parser import AWAITING_CONTROL_LINE

    own = b"%d" % sid

    async def parse_frames(data: bytes = b"") -> None:
        buf = parser.buf
        buf.extend(data)
        if parser.state == AWAITING_CONTROL_LINE and buf:
            frames, pos, payload_bytes, partial = cut_frames(buf, own)
            if pos:
                del buf[:pos]
                deliver(frames, payload_bytes)
            if partial:
                return
        if buf:
            await parse(b"")

    return parse_frames


class RawSubscription:
    """``SubscriptionReader``'s interface over raw tuples from one subscription (see the module doc).

    With ``max_msgs``/``max_bytes`` (a core subscription's pending limits) a message past either is dropped
    as nats-py drops it (a slow consumer), counted in ``dropped`` and reported to ``on_drop``.
    """

    def __init__(self, batch_size: int, batch_timeout: float, max_buffered: int, status: Any = None,
                 max_msgs: int = 0, max_bytes: int = 0, on_drop: Callable[[], None] | None = None) -> None:
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.max_buffered = max(max_buffered, batch_size)
        self.status = status
        self.max_msgs = max_msgs
        self.max_bytes = max_bytes
        self.on_drop = on_drop
        self.items: deque[Frame] = deque()
        self.pending_bytes = 0
        self.received = 0  # every message, status or heartbeat included: the pull request is alive
        self.delivered = 0
        self.dropped = 0  # past the pending limits
        self.taken = 0  # messages of any kind taken out: where an event between them happened
        self._wake = asyncio.Event()
        self._installed: tuple[Any, Any, Any] | None = None

    def attach(self, nc: Any, sub: Any) -> None:
        """Take over delivery of ``sub``'s messages on ``nc``: its ``_process_msg`` hook, and a fast path for them
        in its parser (``_frames_parser``)."""
        original = nc._process_msg
        sid = sub._id
        items = self.items
        wake = self._wake
        max_msgs, max_bytes = self.max_msgs, self.max_bytes
        stats = nc.stats

        def deliver(frames: list[Frame], payload_bytes: int) -> None:
            n = len(frames)
            stats["in_msgs"] += n
            stats["in_bytes"] += payload_bytes
            self.received += n
            if (max_msgs and len(items) + n > max_msgs) or (max_bytes and self.pending_bytes + payload_bytes >= max_bytes):
                frames = self._within_limits(frames)  # some are dropped: looked at one by one
                payload_bytes = sum(len(f[1]) for f in frames)
            self.pending_bytes += payload_bytes
            items.extend(frames)
            if frames and not wake.is_set():
                wake.set()

        async def process_msg(s: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
            if s != sid:
                await original(s, subject, reply, data, headers)
                return
            deliver([(reply, data, headers, subject)], len(data))

        parser = nc._ps
        before = vars(parser).get("parse")  # another raw subscription's fast path on this connection, or none
        nc._process_msg = process_msg
        parser.parse = _frames_parser(parser, parser.parse, sid, deliver)
        self._installed = (nc, original, before)

    def _within_limits(self, frames: list[Frame]) -> list[Frame]:
        """The frames that fit the pending limits, one at a time as nats-py takes them; the rest dropped."""
        kept: list[Frame] = []
        held, pending = len(self.items), self.pending_bytes
        for frame in frames:
            size = len(frame[1])
            if (self.max_msgs and held >= self.max_msgs) or (self.max_bytes and pending + size >= self.max_bytes):
                self.dropped += 1
                if self.on_drop is not None:
                    self.on_drop()
                continue
            kept.append(frame)
            held += 1
            pending += size
        return kept

    def detach(self) -> None:
        if self._installed is not None:
            nc, original, before = self._installed
            nc._process_msg = original
            if before is None:
                vars(nc._ps).pop("parse", None)  # nats-py's own parser again
            else:
                nc._ps.parse = before
            self._installed = None

    def __len__(self) -> int:
        return len(self.items)

    @property
    def position(self) -> int:
        """Messages that have entered so far (taken or waiting): something that happens now (a disconnect, a
        message on another subscription) comes after all of them."""
        return self.taken + len(self.items)

    async def _wait(self, stopping: asyncio.Event, interrupt: asyncio.Event | None = None) -> bool:
        """Wait for a message; False when ``stopping`` or ``interrupt`` is set first (waited on only while
        nothing is buffered: a take with messages at hand starts no task)."""
        ends = (stopping,) if interrupt is None else (stopping, interrupt)
        while not self.items:
            if any(e.is_set() for e in ends):
                return False
            self._wake.clear()
            waits = [asyncio.ensure_future(e.wait()) for e in (self._wake, *ends)]
            try:
                await asyncio.wait(waits, timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        return True

    def _drain(self, want: int) -> list[Frame]:
        """Up to ``want`` messages off the queue; status messages on the way go to ``status``, not in the batch."""
        items = self.items
        out: list[Frame] = []
        while items and len(out) < want:
            k = min(want - len(out), len(items))
            if k == len(items):
                got = list(items)
                items.clear()
            else:
                pop = items.popleft
                got = [pop() for _ in range(k)]
            self.taken += k
            if not all(map(_PAYLOAD, got)):  # an empty payload: a status message, or an empty record
                got = self._without_status(got)
            out += got
        return out

    def _without_status(self, got: list[Frame]) -> list[Frame]:
        """``got`` without the server's status messages (no payload, a status line), each handed to ``status``."""
        out: list[Frame] = []
        for item in got:
            _, data, headers, _ = item
            if not data and headers is not None and has_status(headers):
                if self.status is not None:
                    self.status(parse_headers(headers))
                continue
            out.append(item)
        return out

    async def take(self, limit: int, stopping: asyncio.Event, interrupt: asyncio.Event | None = None
                   ) -> Received | None:
        """Up to ``limit`` messages: waits for the first, then up to ``batch_timeout`` for a full batch; None when
        ``stopping`` (or ``interrupt``: something else for the source to do) is set while nothing is buffered."""
        want = min(limit, self.batch_size)
        got: list[Frame] = []
        while not got:
            if not await self._wait(stopping, interrupt):
                return None
            got = self._drain(want)
        first = time.time_ns()
        if len(got) < want and self.batch_timeout > 0 and not stopping.is_set():
            await asyncio.sleep(self.batch_timeout)
            got += self._drain(want - len(got))
        now = time.time_ns()
        n = len(got)
        received = self._columns(got, [first] + [now] * (n - 1))
        self.pending_bytes -= sum(map(len, received.data))
        self.delivered += n
        return received

    @staticmethod
    def _columns(got: list[Frame], times: list[int]) -> Received:
        """Tuples as ``Received`` columns: headers parsed, subjects and replies decoded (one decode a column: a
        subject holds no line break)."""
        if not got:
            return Received([], [], [], [], times)
        replies, data, headers, subjects = zip(*got, strict=True)
        return Received(list(data), b"\n".join(subjects).decode().split("\n"), parse_header_column(headers),
                        b"\n".join(replies).decode().split("\n"), times)

    def waiting_replies(self) -> list[str]:
        """Reply subjects of the records waiting (left in place)."""
        return [g[0].decode() for g in self.items if g[1]]

    def drop_replies(self) -> list[str]:
        """Empty the subscription's queue; the reply subjects of what it held (to give the messages back)."""
        return self.drop_messages().replies

    def drop_messages(self) -> Received:
        """Empty the subscription's queue: what it held."""
        got = self._drain(1 << 62)
        self.pending_bytes -= sum(len(g[1]) for g in got)
        return self._columns(got, [time.time_ns()] * len(got))
