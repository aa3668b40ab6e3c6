"""Core NATS: the ``nats`` sink (publish) and source (consume), and the wire mapping both NATS connectors use.

Core NATS is at-most-once: a message published while no subscriber listens, or dropped
because a subscriber's pending buffer was full (a slow consumer), is gone. Use the
``jetstream`` connectors where every record must arrive.

The wire contract (DESIGN.md): payload = compress(serialize(value)); headers
``Content-Type`` and ``Content-Encoding`` (set by the operators), ``Wirepipe-Sent-At``
(integer ns since the Unix epoch, stamped here when each record is published),
``Nats-Msg-Id`` on JetStream. ``headers: none`` publishes bare payloads for pipelines
whose two ends are configured alike.

Subjects are templates: ``points`` (one subject), ``blocks.{seq}`` (any per-record meta
column), ``out.{subject}`` (the subject the record came in on, for relays; a ``subject``
operator sets it from record fields, e.g. ``orders.{region}``).

Oversized records: nats-py sends a payload whose size plus headers exceeds the
server's ``max_payload`` and the server then closes the connection. The sink checks
payload + headers itself and refuses such a record (it goes to the dead-letter
destination with a clear error); the connection stays up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import string
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator

from ..batch import Batch, Rejected
from ..errors import ConfigError, WirepipeError
from ..pipelines.models import Duration, Size
from .base import Sink, Source
from .gaps import PUBLISHER, SEQ, STAMP_SIZE, GapCounter, PublisherStamp
from .natsconn import ConnectionOptions, NatsConnection, NatsConnectionConfig

log = logging.getLogger("wirepipe.nats")

SENT_AT = "Wirepipe-Sent-At"
STAGE_HEADER = "Wirepipe-Stage"
ERROR_HEADER = "Wirepipe-Error"
_HDR_LINE = len(b"NATS/1.0\r\n") + 2  # status line + the blank line that ends the block
_SENT_AT_SIZE = len(SENT_AT) + 4 + 19  # "key: value\r\n" with a 19-digit ns timestamp
# Per-record header blocks are measured exactly only for payloads this close to the limit.
_HEADER_SLACK = 65536


# --- subjects ------------------------------------------------------------------------------------


class SubjectTemplate:
    """``points``, ``blocks.{seq}``, ``out.{subject}``: one subject per record from meta columns."""

    def __init__(self, template: str) -> None:
        self.template = template
        try:
            self.fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            raise ValueError(f"subject template {template!r}: {exc}") from None
        if any(not f for f in self.fields):
            raise ValueError(f"subject template {template!r}: empty {{}} placeholder; name a field such as {{seq}}")
        if any(ch in template for ch in " \t\r\n"):
            raise ValueError(f"subject {template!r} contains whitespace")

    @property
    def fixed(self) -> bool:
        return not self.fields

    def render(self, batch: Batch) -> str | list[str]:
        if not self.fields:
            return self.template
        n = len(batch.values)
        columns: dict[str, Sequence[Any]] = {}
        for f in self.fields:
            if f == "subject":
                s = batch.subjects
                if s is None:
                    raise WirepipeError(f"subject template {self.template!r}: the records have no subject")
                columns[f] = [s] * n if isinstance(s, str) else s
            elif f in batch.meta:
                columns[f] = batch.meta[f]
            else:
                raise WirepipeError(
                    f"subject template {self.template!r}: no column {f!r} (available: subject, "
                    f"{', '.join(batch.meta) or 'none'}; set per-record subjects with a `subject` operator)")
        if self.template == "{subject}":
            return list(columns["subject"])
        fmt = self.template.format
        names = list(columns)
        cols = [columns[k] for k in names]
        return [fmt(**dict(zip(names, row, strict=True))) for row in zip(*cols, strict=True)]


# --- header sizes and the max_payload check ---------------------------------------------------------


def header_size(headers: dict[str, str] | None) -> int:
    """Bytes nats-py puts on the wire for a header block (0 without headers)."""
    if not headers:
        return 0
    return _HDR_LINE + sum(len(k.encode()) + len(str(v).encode()) + 4 for k, v in headers.items())


def refuse_oversized(batch: Batch, headers: dict[str, str] | list[dict[str, str] | None] | None,
                     max_payload: int, stage: str, operator: str, extra: int = 0) -> None:
    """Move records whose payload + headers exceed ``max_payload`` to ``batch.rejected``.

    ``extra`` is header bytes the sink adds to every record (``Wirepipe-Sent-At``,
    ``Nats-Msg-Id``). The common case costs one ``max(map(len, values))``.
    """
    values = batch.values
    if not values:
        return
    longest = max(map(len, values))
    if isinstance(headers, list):
        if longest + extra + _HDR_LINE <= max_payload - _HEADER_SLACK:
            return
        sizes = [header_size(h) + extra if h else (extra + _HDR_LINE if extra else 0) for h in headers]
        bad = [i for i, v in enumerate(values) if len(v) + sizes[i] > max_payload]
    else:
        hsize = header_size(headers) + extra + (_HDR_LINE if extra and not headers else 0)
        if longest + hsize <= max_payload:
            return
        sizes = None
        bad = [i for i, v in enumerate(values) if len(v) + hsize > max_payload]
    if not bad:
        return
    for i in bad:
        h = sizes[i] if sizes is not None else hsize
        batch.rejected.append(batch.reject(
            i, stage, operator,
            f"payload {len(values[i])} B + headers {h} B exceeds the server's max_payload {max_payload} B: "
            "refused (the connection stays up); compress harder, split the record or raise max_payload"))
    drop = set(bad)
    batch.keep([i for i in range(len(values)) if i not in drop])


def wire_headers(batch: Batch, mode: str) -> dict[str, str] | list[dict[str, str] | None] | None:
    """The headers to publish: the batch's (shared dict or per record), or none with ``headers: none``."""
    if mode == "none":
        return None
    h = batch.headers
    if isinstance(h, list):
        return h
    return dict(h) if h else {}


def require_bytes(batch: Batch, stage: str, operator: str) -> None:
    values = batch.values
    if values and not isinstance(values[0], (bytes, bytearray, memoryview)):
        raise ConfigError(
            f"{stage} ({operator}) needs bytes but got {type(values[0]).__name__}: add a `serialize` operator "
            "(and `compress`) before the NATS sink")


def rejected_payloads(rejected: list[Rejected]) -> Batch:
    """Dead letters for a NATS subject: the original payload (JSON when the record was an object)
    with its headers plus ``Wirepipe-Stage`` and ``Wirepipe-Error``."""
    import orjson

    from ..codecs.formats import json_default

    values: list[bytes] = []
    headers: list[dict[str, str] | None] = []
    for r in rejected:
        v = r.value
        if isinstance(v, (bytes, bytearray, memoryview)):
            values.append(bytes(v))
            h = dict(r.headers or {})
        else:
            try:
                values.append(orjson.dumps(v, default=json_default))
            except TypeError:
                values.append(repr(v).encode())
            h = {k: val for k, val in (r.headers or {}).items() if k not in ("Content-Type", "Content-Encoding")}
            h["Content-Type"] = "application/json"
        h.pop(SENT_AT, None)
        h[STAGE_HEADER] = r.stage
        h[ERROR_HEADER] = " ".join(r.error.split())[:1024]
        if r.subject:
            h["Wirepipe-Subject"] = r.subject
        if r.meta.get("stream_seq") is not None:
            h["Wirepipe-Stream-Seq"] = str(r.meta["stream_seq"])
        headers.append(h)
    meta: dict[str, Sequence[Any]] = {"seq": [r.meta.get("seq") for r in rejected]}
    return Batch(values, subjects=[r.subject or "" for r in rejected], headers=headers, meta=meta)


# --- sink -----------------------------------------------------------------------------------------


class NatsSink(Sink):
    """Publishes every record of a batch to core NATS with the wire-contract headers."""

    type = "nats"
    stage = "publish"

    def __init__(self, subject: str, *, options: ConnectionOptions | None = None, headers: str = "wire",
                 flush_timeout: float = 10.0) -> None:
        self.subject = SubjectTemplate(subject)
        self.options = options or ConnectionOptions()
        self.headers_mode = headers
        self.flush_timeout = flush_timeout
        self.conn = NatsConnection(self.options, role="publisher")
        self.nc: Any = None
        self.max_payload = 0
        self.records = 0
        self.bytes = 0
        self.stamp = PublisherStamp()  # Wirepipe-Publisher / Wirepipe-Seq: consumers count gaps

    @property
    def params(self) -> dict[str, Any]:
        return {"subject": self.subject.template, "headers": self.headers_mode, **self.options.public_params()}

    async def open(self) -> None:
        self.nc = await self.conn.connect()
        self.max_payload = int(self.nc.max_payload)

    async def write(self, batch: Batch) -> None:
        if not batch.values:
            return
        require_bytes(batch, self.stage, self.type)
        headers = wire_headers(batch, self.headers_mode)
        extra = _SENT_AT_SIZE + STAMP_SIZE if headers is not None else 0
        refuse_oversized(batch, headers, self.max_payload, self.stage, self.type, extra)
        if isinstance(headers, list) and len(headers) != len(batch.values):
            headers = batch.headers  # refuse_oversized dropped records: the batch's column is aligned
        if not batch.values:
            return
        first = self.stamp.take(len(batch.values)) if headers is not None else 0
        await self.publish(self.subject.render(batch), batch.values, headers, first)

    async def publish(self, subjects: str | list[str], values: list[bytes],
                      headers: dict[str, str] | list[dict[str, str] | None] | None, first: int = 0) -> None:
        """The hot loop: one ``nc.publish`` per record, stamped just before it with ``Wirepipe-Sent-At``
        and, from ``first`` on, ``Wirepipe-Seq`` (with headers; ``first`` is 0 only without them)."""
        pub = self.nc.publish
        now = time.time_ns
        pid = self.stamp.id
        seq = first
        try:
            if headers is None:
                if isinstance(subjects, str):
                    for v in values:
                        await pub(subjects, v)
                else:
                    for s, v in zip(subjects, values, strict=True):
                        await pub(s, v)
            elif isinstance(headers, dict):
                # nats-py encodes the headers before its first await, so one dict is reused.
                h = headers
                h[PUBLISHER] = pid
                if isinstance(subjects, str):
                    for v in values:
                        h[SENT_AT] = str(now())
                        h[SEQ] = str(seq)
                        seq += 1
                        await pub(subjects, v, headers=h)
                else:
                    for s, v in zip(subjects, values, strict=True):
                        h[SENT_AT] = str(now())
                        h[SEQ] = str(seq)
                        seq += 1
                        await pub(s, v, headers=h)
            else:
                subs = [subjects] * len(values) if isinstance(subjects, str) else subjects
                for s, v, hd in zip(subs, values, headers, strict=True):
                    await pub(s, v, headers={**(hd or {}), SENT_AT: str(now()), PUBLISHER: pid, SEQ: str(seq)})
                    seq += 1
        except Exception as exc:
            await self._publish_failed(exc, subjects, values, headers, first)
        self.records += len(values)
        self.bytes += sum(map(len, values))

    async def _publish_failed(self, exc: Exception, subjects: Any, values: list[bytes], headers: Any,
                              first: int) -> None:
        """A full outbound buffer while disconnected: wait for the reconnect, then publish again (at-most-once)."""
        import nats.errors

        if not isinstance(exc, nats.errors.OutboundBufferLimitError):
            if isinstance(exc, nats.errors.ConnectionClosedError):
                raise WirepipeError(f"NATS connection to {self.conn.public_url} is closed") from None
            raise WirepipeError(f"publish to {self.conn.public_url} failed: {exc}") from None
        # Records before the failure are in the outbound buffer; republishing all of the batch may
        # duplicate some, which core NATS (at-most-once, no dedup) accepts as a trade for not losing them.
        # They keep their Wirepipe-Seq, so consumers count them as duplicates, not as new records.
        while not self.nc.is_connected:
            if self.nc.is_closed:
                raise WirepipeError(f"NATS connection to {self.conn.public_url} is closed") from None
            await asyncio.sleep(0.05)
        await self.publish(subjects, values, headers, first)

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        """As a dead-letter destination: publish the original payloads with stage and error headers."""
        batch = rejected_payloads(rejected)
        refuse_oversized(batch, batch.headers, self.max_payload, self.stage, self.type, _SENT_AT_SIZE + STAMP_SIZE)
        if batch.rejected:
            log.error("%d dead letter(s) too large to publish to %s: dropped", len(batch.rejected),
                      self.subject.template)
        if batch.values:
            await self.publish(self.subject.render(batch), batch.values, batch.headers,
                               self.stamp.take(len(batch.values)))

    async def flush(self) -> None:
        if self.nc is not None and self.nc.is_connected:
            try:
                await self.nc.flush(timeout=self.flush_timeout)
            except Exception as exc:
                raise WirepipeError(f"flush to {self.conn.public_url} failed: {type(exc).__name__}") from None

    async def close(self) -> None:
        with contextlib.suppress(WirepipeError):
            await self.flush()
        await self.conn.close()


class NatsSinkConfig(NatsConnectionConfig):
    """``sink: {type: nats, url: "${NATS_URL:-embedded}", subject: points}``"""

    type: Literal["nats"]
    subject: str = Field(description="subject or template: points, blocks.{seq}, out.{subject}")
    headers: Literal["wire", "none"] = "wire"
    flush_timeout: Duration = 10.0

    @field_validator("subject")
    @classmethod
    def _template(cls, v: str) -> str:
        SubjectTemplate(v)
        return v

    def build(self) -> NatsSink:
        return NatsSink(self.subject, options=self.connection_options(), headers=self.headers,
                        flush_timeout=self.flush_timeout)


# --- source ---------------------------------------------------------------------------------------


def sent_at_column(headers: list[dict[str, str] | None]) -> list[int | None]:
    """``Wirepipe-Sent-At`` of each record as int ns, None when absent or malformed."""
    try:
        return [int(h[SENT_AT]) if h and SENT_AT in h else None for h in headers]
    except ValueError:  # a malformed value: redo record by record
        out: list[int | None] = []
        for h in headers:
            try:
                out.append(int(h[SENT_AT]) if h and SENT_AT in h else None)
            except ValueError:
                out.append(None)
        return out


class Received:
    """Messages taken from a ``BufferedSubscriber``, as columns."""

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

    def attach(self, sub: Any) -> None:
        self.sub = sub
        self.queue = sub._pending_queue  # nats-py keeps it there for next_msg()/messages

    def __len__(self) -> int:
        return self.queue.qsize() if self.queue is not None else 0

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
        data = [m.data for m in msgs]
        self.sub._pending_size -= sum(map(len, data))
        self.delivered += len(msgs)
        return Received(data, [m.subject for m in msgs], [m.headers for m in msgs], [m.reply for m in msgs], times)

    def waiting_replies(self) -> list[str]:
        """Reply subjects of the messages waiting in the queue (left in it)."""
        queue = self.queue
        return [m.reply for m in getattr(queue, "_queue", ()) if m.reply] if queue is not None else []

    def drop_replies(self) -> list[str]:
        """Empty the queue; the reply subjects of what it held (to give JetStream messages back)."""
        msgs: list[Any] = []
        if self.queue is not None:
            self._drain(msgs, 1 << 62)
        return [m.reply for m in msgs]


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
    tail = b" %d\r\n%b\r\n" % (len(body), body)
    await nc._send_command(b"".join([b"PUB " + s.encode() + tail for s in targets]))
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()  # kick nats-py's flusher, as its publish does: nothing else may publish soon
    return len(targets)


class NatsSource(Source):
    """Subscribes (subject with wildcards, optional queue group) and yields batches of received messages.

    Core NATS loses messages under overload; the source counts every loss it can know of
    (``losses()``): numbers missing from each publisher's ``Wirepipe-Seq`` (``gaps.py``;
    off in a queue group, where each member sees only its share), messages nats-py dropped
    because the subscription's pending limits were reached and that no gap covers (the
    tail), and messages received but never handed to the pipeline because it stopped.
    """

    type = "nats"
    stage = "consume"
    drops_when_unread = True

    def __init__(self, subject: str, *, queue: str | None = None, options: ConnectionOptions | None = None,
                 batch_size: int = 1000, batch_timeout: float = 0.005, pending_msgs_limit: int = 65536,
                 pending_bytes_limit: int = 64 * 1024 * 1024, count: int | None = None,
                 duration: float | None = None, gaps: bool | None = None) -> None:
        super().__init__(count=count, duration=duration)
        self.subject = subject
        self.queue = queue
        self.options = options or ConnectionOptions()
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.pending_msgs_limit = pending_msgs_limit
        self.pending_bytes_limit = pending_bytes_limit
        self.conn = NatsConnection(self.options, role="consumer")
        self.buffer = SubscriptionReader(batch_size, batch_timeout, max_buffered=pending_msgs_limit)
        self.sub: Any = None
        self.ready = asyncio.Event()
        self.gaps = GapCounter() if (gaps if gaps is not None else not queue) else None
        self._drops_in_gaps = 0  # client-side drops a later gap already counted
        self.discarded = 0

    @property
    def params(self) -> dict[str, Any]:
        return {"subject": self.subject, "queue": self.queue, "batch_size": self.batch_size,
                **self.options.public_params()}

    @property
    def dropped(self) -> int:
        """Messages the server sent that were dropped because the pending limits were reached."""
        return self.conn.stats.slow_consumer_drops

    @property
    def lost(self) -> int:
        missing = self.gaps.missing if self.gaps is not None else 0
        return missing + self.dropped - self._drops_in_gaps + self.discarded

    def losses(self) -> dict[str, int]:
        g = self.gaps
        return {"lost": self.lost, "missing": g.missing if g else 0, "dropped": self.dropped,
                "discarded": self.discarded, "duplicates": g.duplicates if g else 0,
                "reordered": g.reordered if g else 0}

    def lag(self) -> int | None:
        """Messages received but not yet handed to the pipeline."""
        return len(self.buffer)

    async def let_read(self) -> None:
        """Yield until nats-py's reader stops finding messages (at most ~64 turns): it reads one socket
        chunk (tens of KB) per event-loop turn, so a single yield between operator slices reads too
        little while a burst arrives; reading gets priority over the operators."""
        sub = self.sub
        seen = -1
        for _ in range(64):
            received = sub._received if sub is not None else 0
            if received == seen:
                return
            seen = received
            await asyncio.sleep(0)

    async def open(self) -> None:
        nc = await self.conn.connect()
        self.sub = await nc.subscribe(self.subject, queue=self.queue or "",
                                      pending_msgs_limit=self.pending_msgs_limit,
                                      pending_bytes_limit=self.pending_bytes_limit)
        self.buffer.attach(self.sub)
        await nc.flush(timeout=10)  # the server knows the subscription before publishers start
        self.ready.set()

    async def batches(self) -> AsyncIterator[Batch]:
        left = self.count if self.count is not None else -1
        gaps = self.gaps
        while left != 0:
            got = await self.buffer.take(left if left > 0 else self.batch_size, self.stopping)
            if got is None:
                return
            if left > 0:
                left -= len(got)
            if gaps is not None:
                missing = gaps.observe(got.headers)
                if missing > 0:  # nats-py's drops before this batch show in its gaps: count them once
                    self._drops_in_gaps += min(missing, self.dropped - self._drops_in_gaps)
            yield got.batch()

    async def close(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()
            self.sub = None
        # Received, never processed: core NATS will not send them again.
        self.discarded += len(self.buffer.drop_replies())
        if self.discarded:
            log.warning("%s: %d message(s) received but not processed at stop (core NATS: lost)",
                        self.subject, self.discarded)
        await self.conn.close()


class NatsSourceConfig(NatsConnectionConfig):
    """``source: {type: nats, url: ..., subject: "points.>", queue: workers}``"""

    type: Literal["nats"]
    subject: str
    queue: str | None = Field(default=None, description="queue group: the messages are shared among its members")
    batch_size: int = Field(default=1000, ge=1)
    batch_timeout: Duration = Field(default=0.005, description="wait this long for a full batch once one record is in")
    pending_msgs_limit: int = Field(default=65536, ge=1)
    pending_bytes_limit: Size = 64 * 1024 * 1024
    count: int | None = Field(default=None, ge=0)
    duration: Duration | None = None
    gaps: bool | None = Field(default=None, description="count messages missing from each publisher's "
                              "Wirepipe-Seq; default on, off in a queue group (members see only a share)")

    def build(self) -> NatsSource:
        return NatsSource(self.subject, queue=self.queue, options=self.connection_options(),
                          batch_size=self.batch_size, batch_timeout=self.batch_timeout,
                          pending_msgs_limit=self.pending_msgs_limit, pending_bytes_limit=self.pending_bytes_limit,
                          count=self.count, duration=self.duration, gaps=self.gaps)
