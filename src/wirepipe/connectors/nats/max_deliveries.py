"""Records a durable consumer gave up on: delivered ``max_deliver`` times without an acknowledgement (a worker
killed each time it held one, a batch that never commits), the server stops delivering them and says so only in
an advisory, ``$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`` (JSON with ``stream_seq`` and
``deliveries``). Unheard, such a record would leave the run silently.

``MaxDeliveries`` listens to that advisory (in a queue group named after the consumer: a pool's workers handle
each advisory once), fetches each record by its stream sequence (it is still in the stream: it was never
acknowledged, so neither work-queue nor interest retention removed it) and hands it to the pipeline as a dead
letter of the ``consume`` stage with the reason. A record no longer in the stream (a limit removed it since)
becomes a dead letter without its payload, whose reason says so and names the sequence: counted either way.

The server keeps such a record in the stream whatever its retention, so that its owner can move it to a dead
letter (nats-server's maintainers: "you can decide what to do with the message, in terms of deleting, retrying or
moving to DLQ"). Once its dead letter is written (``settle``, at the commit, as a bad record's term), wirepipe does
what a dead-letter queue does (Azure Service Bus, SQS redrive): in a work-queue stream, whose messages are its one
consumer's and leave when acknowledged, it deletes the record, as an acknowledgement would have; a limits stream
keeps it (its limits remove it; other readers and replays see it), and so does an interest stream (other
consumers may still read it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from ...core.batch import Rejected
from ...core.stages import Stage

log = logging.getLogger("wirepipe.jetstream")

ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
_FETCH_TIMEOUT = 5.0  # seconds for one stream message get; unanswered, it is asked again at the next look
_GIVEN_UP = "max_delivered"  # a dead letter's meta key: made here, settled by ``MaxDeliveries.settle``


def advisory_subject(stream: str, consumer: str) -> str:
    """The subject the server announces ``consumer``'s given-up records on.

    >>> advisory_subject("POINTS", "points-worker")
    '$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.POINTS.points-worker'
    """
    return f"{ADVISORY}.{stream}.{consumer}"


def reason(deliveries: int) -> str:
    """The dead letter's error.

    >>> reason(5)
    'delivered 5 times (max_deliver) without being acknowledged'
    """
    return f"delivered {deliveries} times (max_deliver) without being acknowledged"


class MaxDeliveries:
    """The advisories of one consumer, turned into dead letters (see the module doc)."""

    def __init__(self, operator: str) -> None:
        self.operator = operator  # the source's type, the dead letter's operator
        self.announced: list[tuple[int, int]] = []  # (stream sequence, deliveries) heard and not fetched yet
        self.given_up = 0  # records the server gave up on, every one dead-lettered (``take``)
        self.removed = 0  # of them, deleted from a work-queue stream once their dead letter was written
        self._work_queue: bool | None = None  # the stream's retention is work-queue (None: not asked yet)
        self.refused: str | None = None  # the server refused the subscription (permissions): said once
        self._subject = ""
        self._sub: Any = None
        self.arrived = asyncio.Event()  # an advisory came: the source yields its dead letter without waiting

    async def start(self, conn: Any, stream: str, consumer: str) -> None:
        """Subscribe to ``consumer``'s advisories; a refusal (the account may not subscribe to ``$JS.EVENT.>``) is
        logged once and the source goes on without them."""
        self._subject = advisory_subject(stream, consumer)
        conn.on_error(self._refusal)
        self._sub = await conn.nc.subscribe(self._subject, queue=consumer, cb=self._on_advisory)
        await conn.flush(5.0)  # a refusal arrives before the flush's answer

    def _refusal(self, exc: Exception) -> bool:
        text = str(exc).lower()
        if "permissions violation" not in text or self._subject.lower() not in text:
            return False
        if self.refused is None:
            self.refused = str(exc).removeprefix("nats: ")
            log.warning("not subscribed to %s (%s): a record delivered max_deliver times without an acknowledgement "
                        "cannot be dead-lettered; allow the account to subscribe to %s.> or set max_deliver: -1",
                        self._subject, self.refused, ADVISORY)
        return True

    async def _on_advisory(self, msg: Any) -> None:
        try:
            advisory = json.loads(msg.data)
            seq, deliveries = int(advisory["stream_seq"]), int(advisory.get("deliveries", 0))
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable max-deliveries advisory on %s: %r", self._subject, bytes(msg.data[:200]))
            return
        log.warning("stream sequence %d was delivered %d times without being acknowledged (max_deliver): the "
                    "server delivers it no more; it goes to the dead letter", seq, deliveries)
        self.announced.append((seq, deliveries))
        self.arrived.set()

    async def take(self, js: Any, stream: str) -> list[Rejected]:
        """The records announced so far as dead letters, fetched from the stream; those the server did not answer
        for (an outage) stay for the next call."""
        import nats.errors
        import nats.js.errors

        self.arrived.clear()
        letters: list[Rejected] = []
        left: list[tuple[int, int]] = []
        for seq, deliveries in self.announced:
            why = reason(deliveries)
            try:
                msg = await asyncio.wait_for(js.get_msg(stream, seq), _FETCH_TIMEOUT)
            except nats.js.errors.NotFoundError:
                log.error("stream sequence %d (%s) is no longer in stream %s: dead-lettered without its payload",
                          seq, why, stream)
                letters.append(Rejected(Stage.CONSUME, self.operator,
                                        f"{why}; stream sequence {seq} is no longer in stream {stream}: its payload "
                                        "is lost", b"", meta={"seq": seq, "stream_seq": seq, _GIVEN_UP: True}))
                continue
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                log.debug("stream sequence %d not fetched yet: %s", seq, type(exc).__name__)
                left.append((seq, deliveries))
                continue
            letters.append(Rejected(Stage.CONSUME, self.operator, why, msg.data or b"", subject=msg.subject,
                                    headers=dict(msg.headers) if msg.headers else None,
                                    meta={"seq": seq, "stream_seq": seq, _GIVEN_UP: True}))
        self.announced = left
        self.given_up += len(letters)
        return letters

    async def settle(self, js: Any, stream: str, rejected: list[Rejected]) -> None:
        """The dead letters made here among ``rejected``, now written: deleted from a work-queue stream (the module
        doc). A deletion that fails leaves the record in the stream and says how to remove it."""
        import nats.errors
        import nats.js.errors

        seqs = [r.meta["stream_seq"] for r in rejected if r.meta.get(_GIVEN_UP)]
        if not seqs:
            return
        left = list(seqs)  # not removed yet
        try:
            if self._work_queue is None:
                from nats.js.api import RetentionPolicy

                info = await asyncio.wait_for(js.stream_info(stream), _FETCH_TIMEOUT)
                self._work_queue = info.config.retention == RetentionPolicy.WORK_QUEUE
            if not self._work_queue:
                return
            for seq in seqs:
                try:
                    await asyncio.wait_for(js.delete_msg(stream, seq), _FETCH_TIMEOUT)
                    self.removed += 1
                except nats.js.errors.NotFoundError:  # gone already (a limit, an operator): nothing to remove
                    pass
                left.remove(seq)
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            log.warning("stream sequence(s) %s dead-lettered (max_deliver) but not removed from stream %s (%s): "
                        "remove them with `nats stream rmm %s SEQ`", ", ".join(map(str, left)), stream,
                        type(exc).__name__, stream)

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception as exc:  # the connection is closing: the server drops the subscription itself
                log.debug("advisory unsubscribe: %s", type(exc).__name__)
