"""The ``nats`` source: a core NATS subscription (wildcards, optional queue group) read in batches.

Core NATS is at-most-once: a message published while no subscriber listens, or dropped
because a subscriber's pending buffer was full (a slow consumer), is gone. The source
counts every loss it can know of (gaps.py); use the ``jetstream`` source where every record must arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field

from ...core.batch import Batch
from ...core.models import Duration, Size, SourceLimits
from ..base import Configured, Refusal, Source
from .connection import CONNECTION_PARAMS, NatsConnection, NatsConnectionConfig, embedded_refusal
from .gaps import GapCounter
from .reader import SubscriptionReader

log = logging.getLogger("wirepipe.nats")



class NatsSource(Configured, Source):
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
    shared_by = "queue"  # N workers of a pool join one queue group (the pipeline's name unless given)
    identity_ignores = Source.identity_ignores | CONNECTION_PARAMS | {"queue"}

    def __init__(self, subject: str, **fields: Any) -> None:
        """``fields`` are ``NatsSourceConfig``'s (``queue``, ``batch_size``, ``count``..., the connection's
        ``url``, ``auth``, ``reconnect``...), validated as the YAML is: declared once, there."""
        self._init(NatsSourceConfig, subject=subject, **fields)

    def _configure(self, config: NatsSourceConfig) -> None:
        super().__init__(count=config.count, duration=config.duration)
        self.config = config
        self.subject = config.subject
        self.queue = config.queue
        self.batch_size = config.batch_size
        self.batch_timeout = config.batch_timeout
        self.pending_msgs_limit = config.pending_msgs_limit
        self.pending_bytes_limit = config.pending_bytes_limit
        self.conn = NatsConnection(config, role="consumer")
        self.buffer = SubscriptionReader(self.batch_size, self.batch_timeout, max_buffered=self.pending_msgs_limit)
        self.sub: Any = None
        self.ready = asyncio.Event()
        gaps = config.gaps
        self.gaps = GapCounter() if (gaps if gaps is not None else not self.queue) else None
        self._drops_in_gaps = 0  # client-side drops a later gap already counted
        self.discarded = 0

    @property
    def params(self) -> dict[str, Any]:
        return {"subject": self.subject, "queue": self.queue, "batch_size": self.batch_size,
                **self.config.public_params()}

    def refuse_workers(self, workers: int) -> Refusal | None:
        return embedded_refusal(self.config, workers)

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
        buffer = self.buffer
        seen = -1
        for _ in range(64):
            received = buffer.received
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


class NatsSourceConfig(NatsConnectionConfig, SourceLimits):
    """``source: {type: nats, url: ..., subject: "points.>", queue: workers}``"""

    type: Literal["nats"]
    subject: str
    queue: str | None = Field(default=None, description="queue group: the messages are shared among its members")
    batch_size: int = Field(default=1000, ge=1)
    batch_timeout: Duration = Field(default=0.005, description="wait this long for a full batch once one record is in")
    pending_msgs_limit: int = Field(default=65536, ge=1)
    pending_bytes_limit: Size = 64 * 1024 * 1024
    gaps: bool | None = Field(default=None, description="count messages missing from each publisher's "
                              "Wirepipe-Seq; default on, off in a queue group (members see only a share)")

    def build(self) -> NatsSource:
        return NatsSource.from_config(self)


SOURCES = {"nats": NatsSourceConfig}
RANK = 2  # where its types come in the "allowed" lists (connectors/__init__.py)
