"""The ``nats`` source: a core NATS subscription (wildcards, optional queue group) read in batches.

Core NATS is at-most-once: a message published while no subscriber listens, or dropped
because a subscriber's pending buffer was full (a slow consumer), is gone. The source
counts every loss it can know of (gaps.py); use the ``jetstream`` source where every record must arrive.

With gap counting on, the source also subscribes to the publishers' stamps
(``_WIREPIPE.last.<its subject>``) and notes its disconnects. Both are *events* between
messages: a stamp or a disconnect applies after every message that had entered the
subscription's queue when it happened (``RawSubscription.position``), so the gap counter
sees them in the order the socket delivered them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from ...core.batch import PAYLOADS, Batch
from ...core.errors import CannotShare
from ...core.models import Duration, Size, SourceLimits
from ...core.stages import Stage
from ...wire import STAMP_PREFIX, SYSTEM_PREFIXES, Header, skips_system, system_namespace
from ..connector import Configured, CountsLoss, Drains, ReadsSubjects, ReadsWhileBusy, SharedByWorkers, Source
from .connection import CONNECTION_PARAMS, NatsConnection, NatsConnectionConfig, refuse_embedded
from .gaps import INT64_MAX, GapCounter, parse_seq
from .names import QueueGroup, SubjectPattern
from .reader import RawSubscription

log = logging.getLogger("wirepipe.nats")

# Why gaps are not counted in a queue group: what the refusal of `gaps: true` there says.
QUEUE_SHARES = ("each member receives a share of every publisher's messages, so the numbers the other members "
                "received would count as lost; leave `gaps` unset (off in a queue group: the client's drops and "
                "what a stop discards are still counted) or subscribe without a queue group")



class NatsSource(Configured, Source, SharedByWorkers, CountsLoss, Drains, ReadsWhileBusy, ReadsSubjects):
    """Subscribes (subject with wildcards, optional queue group) and yields batches of received messages.

    Core NATS loses messages under overload; the source counts every loss it can know of
    (``losses()``): numbers missing from each publisher's ``Wirepipe-Seq`` (``gaps.py``;
    off in a queue group, where each member sees only its share), messages nats-py dropped
    because the subscription's pending limits were reached and that no gap covers (the
    tail), messages received but never handed to the pipeline because it stopped, and what
    the pipeline took and could not finish (``discard``). Publishers' stamps count a lost tail,
    shown apart from the gaps (``losses()["tail"]``: claimed, unconfirmed); a disconnect leaves the
    publishers not heard from since *unsure* (``losses()["unsure"]``). A stop unsubscribes, then finishes what
    the client received (``Drains``: ``_stop_receiving``); N workers of a pool join one queue group
    (``shared_by``: the pipeline's name unless given).
    """

    type = "nats"
    gives = PAYLOADS
    stage = Stage.CONSUME
    shared_by = "queue"
    identity_ignores = Source.identity_ignores | CONNECTION_PARAMS | {"queue"}

    def __init__(self, subject: str, **fields: Any) -> None:
        """``fields`` are ``NatsSourceConfig``'s (``queue``, ``batch_size``, ``count``..., the connection's
        ``url``, ``auth``, ``reconnect``...), validated as the YAML is: declared once, there."""
        self._init(NatsSourceConfig, subject=subject, **fields)

    def _configure(self, config: NatsSourceConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.conn = NatsConnection(config, role="consumer", drop_advice="they are lost: raise pending_msgs_limit or "
                                                                        "speed up the pipeline")
        self.buffer = RawSubscription(config.batch_size, config.batch_timeout, config.pending_msgs_limit,
                                      max_msgs=config.pending_msgs_limit, max_bytes=config.pending_bytes_limit,
                                      on_drop=self.conn.client_dropped)
        self.sub: Any = None
        self.ready = asyncio.Event()
        gaps = config.gaps
        self.gaps = GapCounter() if (gaps if gaps is not None else not config.queue) else None
        self._drops_in_gaps = 0  # client-side drops a later gap already counted
        self.discarded = 0
        self.skipped: dict[str, int] = {}  # messages on system subjects a wildcard matched, by namespace ($SRV ...)
        self._stamps: Any = None  # the subscription to the publishers' stamps
        # Stamps and disconnects waiting for the messages before them to be counted: (position, apply).
        self._events: deque[tuple[int, Callable[[], int]]] = deque()
        self._observed = 0  # messages the gap counter has seen (by queue position)

    @property
    def params(self) -> dict[str, Any]:
        config = self.config
        return {"subject": config.subject, "queue": config.queue, "batch_size": config.batch_size,
                **config.public_params()}

    def for_worker(self, index: int, count: int) -> NatsSource:
        """The workers share this subscription (one queue group: ``shared_by``), so each counts no gaps."""
        if self.config.gaps and count > 1:
            raise CannotShare("gaps", f"true: --workers {count} share the messages in one queue group, and "
                                      f"{QUEUE_SHARES}")
        refuse_embedded(self.config, count)
        return self

    @property
    def dropped(self) -> int:
        """Messages the server sent that were dropped because the pending limits were reached."""
        return self.buffer.dropped

    @property
    def lost(self) -> int:
        missing = self.gaps.missing if self.gaps is not None else 0
        return min(INT64_MAX, missing + self.dropped - self._drops_in_gaps + self.discarded)

    def losses(self) -> dict[str, int]:
        """Every count, at most an int64 (what Parquet and Prometheus hold: the sum of several publishers' claims
        could pass it). ``missing`` is ``gap`` + ``tail``: the numbers missing between data messages and those
        only stamps claim (gaps.py)."""
        g = self.gaps
        counts = {"lost": self.lost, "missing": g.missing if g else 0, "gap": g.gap if g else 0,
                  "tail": g.tail if g else 0, "dropped": self.dropped, "discarded": self.discarded,
                  "duplicates": g.duplicates if g else 0, "reordered": g.reordered if g else 0,
                  "malformed": g.malformed if g else 0, "disconnects": self.conn.stats.disconnects,
                  "unsure": g.unsure if g else 0, "forgotten": g.forgotten if g else 0,
                  "forgotten_running": g.forgotten_running if g else 0,
                  "skipped": sum(self.skipped.values())}  # not records, not lost: on system subjects
        return {k: min(v, INT64_MAX) for k, v in counts.items()}

    def discard(self, records: int) -> None:
        self.discarded += records

    @property
    def subjects(self) -> list[str]:
        return [self.config.subject]

    def lag(self) -> int | None:
        """Messages received but not yet handed to the pipeline."""
        return len(self.buffer)

    async def let_read(self) -> None:
        """Yield until nats-py's reader stops finding messages (at most ~64 turns): it reads one socket
        chunk (tens of KB) per event-loop turn, so a single yield between operator slices reads too
        little while a burst arrives; reading gets priority over the operators."""
        buffer = self.buffer
        seen = -1
        for _ in range(64):
            received = buffer.received
            if received == seen:
                return
            seen = received
            await asyncio.sleep(0)

    async def open(self) -> None:
        config = self.config
        nc = await self.conn.connect()
        self.sub = await nc.subscribe(config.subject, queue=config.queue or "",
                                      pending_msgs_limit=config.pending_msgs_limit,
                                      pending_bytes_limit=config.pending_bytes_limit)
        self.buffer.attach(nc, self.sub)
        if self.gaps is not None:
            self._stamps = await nc.subscribe(STAMP_PREFIX + config.subject, cb=self._on_stamp)
            self.conn.on_disconnect(self._on_disconnect)
        await nc.flush(timeout=10)  # the server knows the subscription before publishers start
        self.ready.set()

    def _skip_system(self, batch: Batch, subjects: Sequence[str]) -> None:
        """Keep the records of ``batch`` that are not on a system subject (``wire.SYSTEM_PREFIXES``: service
        requests, request replies, JetStream's API, stamps), counted by namespace in ``skipped``; the first of each
        namespace is logged, with the subject that reads them."""
        kept = []
        for i, s in enumerate(subjects):
            if not s.startswith(SYSTEM_PREFIXES):
                kept.append(i)
                continue
            namespace = system_namespace(s)
            seen = self.skipped.get(namespace, 0)
            self.skipped[namespace] = seen + 1
            if not seen:
                log.info("nats source %r: messages on %s (first: %s) are not records: skipped and counted; "
                         "subscribe to %s.> to read them", self.config.subject, namespace, s, namespace)
        batch.keep(kept)

    async def batches(self) -> AsyncIterator[Batch]:
        left = self.count if self.count is not None else -1
        gaps = self.gaps
        skip_system = skips_system(self.config.subject)
        batch_size = self.config.batch_size
        while left != 0:
            if self.stopping.is_set() and self.sub is not None:
                await self._stop_receiving()
            got = await self.buffer.take(left if left > 0 else batch_size, self.stopping)
            if got is None:
                if self.sub is not None:  # stopped while it waited: unsubscribe, then finish what had been sent
                    continue
                return
            if gaps is not None:
                self._observe(got.headers, self.buffer.taken - len(got))
            batch = got.batch()
            if skip_system and any(s.startswith(SYSTEM_PREFIXES) for s in got.subjects):
                self._skip_system(batch, got.subjects)
                if not batch.values:
                    continue
            if left > 0:
                left -= len(batch.values)
            yield batch

    async def _stop_receiving(self) -> None:
        """A drain, as NATS's own: unsubscribe, then one round trip, so every message the server sent before the
        unsubscribe is in the client's queue (``RawSubscription`` still takes them) for the pipeline to finish;
        what is published later goes to the queue group's other members, or to no one (core NATS)."""
        sub, self.sub = self.sub, None
        nc = self.conn.nc
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
            if nc is not None and nc.is_connected:
                await nc.flush(timeout=5)

    # --- stamps and disconnects: events between messages ------------------------------------------

    def _observe(self, headers: Sequence[dict[str, str] | None], start: int) -> None:
        """Count the gaps of messages at queue positions ``start``... and the events that came between them."""
        gaps = self.gaps
        assert gaps is not None
        end = start + len(headers)
        events = self._events
        missing = 0
        done = 0
        while events and events[0][0] <= end:  # an event at the batch's end follows all of it
            position, apply = events.popleft()
            cut = max(done, position - start)
            if cut > done:
                missing += gaps.observe(headers[done:cut])
                done = cut
            missing += apply()
        missing += gaps.observe(headers[done:] if done else headers)
        self._observed = end
        self._counted(missing)

    def _counted(self, missing: int) -> None:
        if missing > 0:  # nats-py's drops before this show in its gaps: count them once
            self._drops_in_gaps += min(missing, self.dropped - self._drops_in_gaps)

    def _event(self, apply: Callable[[], int]) -> None:
        """``apply`` once the messages that entered the queue before now are counted (at once if they are)."""
        position = self.buffer.position
        if position <= self._observed and not self._events:
            self._counted(apply())
        else:
            self._events.append((position, apply))

    async def _on_stamp(self, msg: Any) -> None:
        gaps = self.gaps
        assert gaps is not None
        h = msg.headers or {}
        publisher, last = h.get(Header.PUBLISHER), parse_seq(h.get(Header.LAST_SEQ))
        if not publisher or last is None:
            gaps.malformed += 1  # counted apart, never a loss figure
            return
        final = Header.FINAL in h
        self._event(lambda: gaps.stamp(publisher, last, final))

    def _on_disconnect(self) -> None:
        gaps = self.gaps
        assert gaps is not None

        def disconnected() -> int:
            gaps.disconnected()
            return 0

        self._event(disconnected)
        log.warning("%s: disconnected while subscribed: what the server held for this consumer and what is "
                    "published until it reconnects is lost (a server also closes a consumer that does not read "
                    "fast enough: its max_pending); counted from each publisher's next message or stamp",
                    self.config.subject)

    async def close(self) -> None:
        for sub in (self.sub, self._stamps):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        self.sub = self._stamps = None
        # Received, never processed: core NATS will not send them again. Their numbers were received (they
        # are discarded, not missing), so the gap counter sees them before the last stamps apply.
        dropped = self.buffer.drop_messages()
        self.buffer.detach()
        # Left unread: lost, unless nobody else was owed them: an observer's copy (wirepipe tap), or what arrived
        # past the run's count on a subscription of its own (a queue group's member took them from the others).
        beyond_count = self.count is not None and self.buffer.delivered >= self.count and not self.config.queue
        if not (self.observer or beyond_count):
            self.discarded += len(dropped)
        if self.gaps is not None:
            self._observe(dropped.headers, self.buffer.taken - len(dropped))
            while self._events:
                self._counted(self._events.popleft()[1]())
        if self.discarded:
            log.warning("%s: %d message(s) received but not processed at stop (core NATS: lost)",
                        self.config.subject, self.discarded)
        unsure = self.gaps.unsure if self.gaps is not None else 0
        if unsure:
            log.warning("%s: %d publisher(s) not heard from since a disconnect: what they published meanwhile "
                        "is lost and not counted (no later message or stamp)", self.config.subject, unsure)
        await self.conn.close()


class NatsSourceConfig(NatsConnectionConfig, SourceLimits):
    """``source: {type: nats, url: ..., subject: "points.>", queue: workers}``"""

    type: Literal["nats"]
    subject: SubjectPattern = Field(description="subject to subscribe to; wildcards allowed (points.>, orders.*.eu)")
    queue: QueueGroup | None = Field(default=None, description="queue group: the messages are shared among its members")
    batch_size: int = Field(default=1000, ge=1, description="records per batch at most")
    batch_timeout: Duration = Field(default=0.005, description="wait this long for a full batch once one record is in")
    pending_msgs_limit: int = Field(default=65536, ge=1, description="messages the client holds for the pipeline; past it the client drops them (counted as lost)")
    pending_bytes_limit: Size = Field(default=64 * 1024 * 1024, description="bytes the client holds for the pipeline; past it the client drops messages (counted as lost)")
    gaps: bool | None = Field(default=None, description="count messages missing from each publisher's "
                              "Wirepipe-Seq; default on, off in a queue group (members see only a share: true "
                              "is refused there)")

    @field_validator("gaps")
    @classmethod
    def _gaps_need_every_message(cls, v: bool | None, info: ValidationInfo) -> bool | None:
        queue = info.data.get("queue")
        if v and queue:
            raise ValueError(f"true with queue {queue!r}: {QUEUE_SHARES}")
        return v

    def build(self) -> NatsSource:
        return NatsSource.from_config(self)


SOURCES = {"nats": NatsSourceConfig}
RANK = 4  # where its types come in the "allowed" lists (connectors/__init__.py)
