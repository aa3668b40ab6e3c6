"""What the two readers of the ``jetstream`` source share: connecting, waiting for the stream (a consumer may
start before its publisher creates it) and for a cluster leader, where a new consumer starts in the stream,
taking a batch, and the JetStream metadata its reply subjects carry.

One class per kind of consumer, as ``JetStreamSourceConfig.build()`` picks it: ``JetStreamSource``
(``jetstream_source.py``), a durable (or ephemeral) pull consumer whose records are acknowledged once the sink
made them durable, and ``OrderedJetStreamSource`` (``jetstream_ordered.py``), nats-py's ordered push consumer,
which acknowledges nothing (replay, tap, capture).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.batch import PAYLOADS, Batch
from ...core.errors import ConfigError, WirepipeError
from ...core.stages import Stage
from ..connector import Configured, ReadsSubjects, ReadsWhileBusy, Source
from .connection import CONNECTION_PARAMS, NatsConnection
from .reader import RawSubscription, Received, SubscriptionReader
from .streams import when_available

if TYPE_CHECKING:
    from .jetstream_source import JetStreamSourceConfig

try:
    from ..._frames import ack_reply_columns
except ImportError:  # built without a compiler (the extension is optional): the Python split
    ack_reply_columns = None  # type: ignore[assignment]

log = logging.getLogger("wirepipe.jetstream")
T = TypeVar("T")

STREAM_POLL = 0.5  # seconds between looks for a stream that does not exist yet


class _StoppedWaiting(Exception):
    """The source was stopped while JetStream did not answer (``open``): nothing to read."""


def _ack_tokens(reply: str) -> tuple[list[str], int]:
    """A ``$JS.ACK...`` reply subject's tokens, and where its fields start past the v1 form's (v2: a domain and an
    account hash first)."""
    t = reply.split(".")
    return t, 0 if len(t) == 9 else 2


def parse_ack_reply(reply: str) -> tuple[int, int, int]:
    """(stream sequence, delivery count, pending) from a ``$JS.ACK...`` reply subject (v1 and v2 forms)."""
    t, off = _ack_tokens(reply)
    return int(t[5 + off]), int(t[4 + off]), int(t[8 + off])


def parse_ack_replies(replies: Sequence[str]) -> tuple[list[int], list[int], int]:
    """The stream sequences and delivery counts of a batch's ``$JS.ACK...`` reply subjects, and the pending count
    of the last: ``parse_ack_reply`` as columns. A batch comes from one consumer, so its replies share one form:
    they are split as one joined string and the columns read with a stride (mixed forms are parsed one by one)."""
    if not replies:
        return [], [], 0
    if ack_reply_columns is not None and type(replies) is list:
        columns = ack_reply_columns(replies)  # one C loop (``wirepipe._frames``); None: a form it does not read
        if columns is not None:
            return columns
    dots = set(map(str.count, replies, itertools.repeat(".")))
    if len(dots) != 1:
        parsed = [parse_ack_reply(r) for r in replies]
        return [p[0] for p in parsed], [p[1] for p in parsed], parsed[-1][2]
    size = dots.pop() + 1
    tokens = ".".join(replies).split(".")
    off = 0 if size == 9 else 2
    return (list(map(int, tokens[5 + off::size])), list(map(int, tokens[4 + off::size])),
            int(tokens[len(tokens) - size + 8 + off]))


def consumer_sequences(replies: Sequence[str]) -> tuple[list[int], list[int]]:
    """The stream and consumer sequences of ``$JS.ACK...`` reply subjects (v1 and v2 forms, as ``parse_ack_reply``):
    a consumer's own sequence has no gap unless the client dropped a message (an ordered consumer's check)."""
    tokens = [_ack_tokens(r) for r in replies]
    return [int(t[5 + off]) for t, off in tokens], [int(t[6 + off]) for t, off in tokens]


class JetStreamReader(Configured, Source, ReadsWhileBusy, ReadsSubjects):
    """A JetStream consumer read as batches of payloads: what the ordered and the durable reader share.

    A subclass opens its kind of consumer (``_open_consumer``: ``sub`` and ``buffer``) and reads it
    (``batches``, built on ``_take`` and ``_batch``).
    """

    type = "jetstream"
    gives = PAYLOADS
    stage = Stage.CONSUME
    identity_ignores = Source.identity_ignores | CONNECTION_PARAMS | {"durable", "ordered"}
    reads_ordered: bool  # the kind of consumer the class reads: ``ordered`` in its config
    drop_advice: str  # what a message the client dropped means for this consumer and what its user can do
    drops_read_again = False  # the reader reads what the client dropped again at once (the ordered consumer)
    config: JetStreamSourceConfig
    buffer: SubscriptionReader | RawSubscription

    def _configure(self, config: JetStreamSourceConfig) -> None:
        if config.ordered != self.reads_ordered:
            kind = "an ordered consumer" if self.reads_ordered else "a pull consumer (durable or ephemeral)"
            raise ConfigError(f"{str(config.ordered).lower()}: {type(self).__name__} reads {kind}; "
                              "JetStreamSourceConfig.build() and wirepipe.jetstream_source() pick the class from "
                              "the config", path="source.ordered")
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.stream = config.stream  # the stream read: given, or the one that stores ``subject`` (found at open)
        self.conn = NatsConnection(config, role="jetstream consumer", drop_advice=self.drop_advice,
                                   drops_read_again=self.drops_read_again)
        self.nc: Any = None
        self.sub: Any = None
        self._seen = 0
        self._lag: int | None = None
        self._redelivered = 0
        self._at_end = asyncio.Event()  # the last message was read (an ordered consumer's stop_at_end)
        self._stream_subjects: list[str] | None = None  # when no filter subject: the stream's, once open

    @property
    def ends(self) -> bool:
        return self.config.stop_at_end or super().ends

    @property
    def params(self) -> dict[str, Any]:
        config = self.config
        return {"stream": self.stream, "subject": config.subject, "durable": config.durable, "ordered": config.ordered,
                "batch_size": config.batch_size, **config.public_params()}

    def lag(self) -> int | None:
        """Messages in the stream not yet delivered to this consumer: from the last message's metadata (a durable
        also asks the server while no message comes: a drained stream shows 0, not what was pending at the last
        message this worker got)."""
        return self._lag

    @property
    def subjects(self) -> list[str] | None:
        """The filter subject, or (without one) the stream's subjects once the source is open."""
        return [self.config.subject] if self.config.subject else self._stream_subjects

    # --- setup ---------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, wait for the stream (a consumer may start before the publisher creates it) and for a
        cluster leader (the consumer cannot be created before it has one), and create or join the consumer;
        stopped meanwhile, the source opens nothing and yields nothing."""
        self.nc = nc = await self.conn.connect()
        js = nc.jetstream()
        if self.stream is None and not self.config.subject:
            raise WirepipeError("the jetstream source needs a stream or a subject")
        try:
            if not await self._wait_for_stream(js):
                return  # stopped while waiting: ``batches`` ends at once
            await self._open_consumer(js)
        except _StoppedWaiting:
            log.info("stopped while waiting for JetStream: nothing was read")

    @abstractmethod
    async def _open_consumer(self, js: Any) -> None:
        """Create (or join) the consumer on the stream, which exists now, and attach ``buffer`` to it."""

    async def _api(self, call: Callable[[], Awaitable[T]]) -> T:
        """A JetStream API request, made again while the cluster has no leader (``when_available``)."""
        result = await when_available(call, f"jetstream consumer of {self.stream or self.config.subject}", self.stopping)
        if result is None:
            raise _StoppedWaiting
        return result

    async def _wait_for_stream(self, js: Any) -> bool:
        """Wait until the stream exists (a consumer may start before the publisher creates it), as the
        connection waits for a server: ``waiting`` names it for the status line and one log line says so at
        once. False when the source was stopped first. A one-off copy (``stop_at_end``) has nothing to
        wait for: a missing stream is an error there."""
        import nats.js.errors

        what = f"stream {self.stream}" if self.stream else f"a stream that stores subject {self.config.subject!r}"
        since = time.monotonic()
        while True:
            try:
                if self.stream is None:
                    self.stream = await self._api(lambda: js.find_stream_name_by_subject(self.config.subject))
                else:
                    info = await self._api(lambda: js.stream_info(self.stream))
                    if not self.config.subject:  # what the pipeline reads: a dead letter must not land there
                        self._stream_subjects = list(info.config.subjects or [])
                break
            except nats.js.errors.NotFoundError:
                if self.config.stop_at_end:
                    raise WirepipeError(f"no JetStream {what}" if self.stream else
                                        f"no JetStream stream stores subject {self.config.subject!r}") from None
            if self.waiting is None:
                self.waiting = what
                log.warning("waiting for %s (it does not exist yet)", what)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), STREAM_POLL)
            if self.stopping.is_set():
                self._at_end.set()
                return False
        if self.waiting is not None:
            log.info("%s is there after %.1fs: consuming", what, time.monotonic() - since)
            self.waiting = None
        return True

    def _deliver_config(self, cfg: Any) -> None:
        """Where a new consumer starts in the stream (``deliver``, ``start_seq``, ``start_time``)."""
        from nats.js import api

        cfg.deliver_policy = api.DeliverPolicy(self.config.deliver)
        if self.config.deliver == "by_start_sequence":
            cfg.opt_start_seq = self.config.start_seq
        elif self.config.deliver == "by_start_time":
            cfg.opt_start_time = self.config.start_time

    # --- receiving ---------------------------------------------------------------------------------

    async def _take(self, left: int, look_after: float | None, wake: asyncio.Event | None = None) -> Received | None:
        """The next batch; None when stopping, and with ``stop_at_end`` when nothing is buffered once the last
        message was read (``_at_end``) or, given ``look_after``, once that many seconds passed (a durable then
        looks at its end); None too when nothing is buffered once ``wake`` is set (a dead letter to yield)."""
        bounded = self.config.stop_at_end
        if not bounded:  # the buffer's own wait ends at either event: no watcher task a take
            if wake is None:
                return await self.buffer.take(left, self.stopping)
            assert isinstance(self.buffer, RawSubscription)  # the durable's (the one with dead letters to yield)
            return await self.buffer.take(left, self.stopping, wake)
        stop = asyncio.Event()
        ends = (self.stopping, self._at_end) if wake is None else (self.stopping, self._at_end, wake)

        async def watch() -> None:
            waits = [asyncio.ensure_future(e.wait()) for e in ends]
            try:
                await asyncio.wait(waits, timeout=look_after, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            # The take still returns what is buffered; set whatever the buffer holds, since what it holds may be
            # only status messages (a heartbeat) that the take consumes, after which it would wait on for data.
            stop.set()

        watcher = asyncio.ensure_future(watch())
        try:
            return await self.buffer.take(left, stop)
        finally:
            watcher.cancel()

    def _batch(self, got: Received) -> Batch:
        """``got`` as a batch with its stream sequences and delivery counts; the lag from its last message."""
        batch = got.batch()
        replies = got.replies
        try:
            seqs, delivered, pending = parse_ack_replies(replies)
        except (IndexError, ValueError):
            seqs, delivered, pending = [0] * len(replies), [1] * len(replies), 0
        batch.meta["seq"] = seqs
        batch.meta["stream_seq"] = seqs
        batch.meta["delivered"] = delivered
        self._redelivered += batch.redelivered() or 0
        self._lag = pending if replies else self._lag
        return batch

    # --- closing -------------------------------------------------------------------------------

    async def _unsubscribe(self) -> None:
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()
            self.sub = None

    async def close(self) -> None:
        await self._unsubscribe()
        await self.conn.close()
