"""The ``jetstream`` source: its config, and the durable pull consumer it builds by default
(``OrderedJetStreamSource``, ``jetstream_ordered.py``, with ``ordered: true``; what both share is
``jetstream_reader.py``'s).

Durable pull consumer. nats-py's ``fetch`` calls ``next_msg`` once per message
(~15k records/s with an ack each); here pull requests go straight to
``$JS.API.CONSUMER.MSG.NEXT`` (``pull_requests.py``: ``PULL_AHEAD`` batches asked for, never more
bytes than half of ``pending_bytes_limit``, a request the server forgot made again) with
replies on one inbox read as raw protocol tuples (``reader.RawSubscription``), and a commit's acks
are written as one buffer, or as one AckAll (``ack: all``, a worker that owns its durable).
Measured on 2 shared cores: ~3.5 us of consumer CPU per record against ~40-50 for a ``fetch``
+ ack loop (benchmarks/jetstream_consume.py), and 5-7 of nats-server's (~3 of them each explicit ack). Records are acknowledged
only after the sink has made them durable; while the sink is unavailable they are kept with in-progress acks
(``+WPI``), never nak-ed (a sink failure must not count toward ``max_deliver``); a record a
stage rejected goes to the dead-letter destination and is terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Sequence
from enum import Enum
from typing import Any, Literal

from pydantic import Field, model_validator

from ...core.batch import Batch, Rejected
from ...core.errors import CannotShare, WirepipeError
from ...core.models import Duration, Size, SourceLimits
from ..connector import AtLeastOnce, SharedByWorkers
from .connection import NatsConnectionConfig, refuse_embedded
from .jetstream_ordered import OrderedJetStreamSource
from .jetstream_reader import JetStreamReader
from .max_deliveries import MaxDeliveries
from .names import ConsumerName, Int64, Nanoseconds, StreamName, StreamSequence, SubjectPattern
from .pull_requests import PullRequester
from .reader import RawSubscription, Received, publish_many

log = logging.getLogger("wirepipe.jetstream")

LAG_REFRESH = 1.0  # seconds without messages after which the lag (and, bounded, the end) is asked of the consumer
# A bounded read (stop_at_end) waits for records another reader holds this long past ack_wait without a change: the
# server's redelivery timer and one more look at the consumer.
END_GRACE = 2.0
_ACK = b"+ACK"
_TERM = b"+TERM"
_WPI = b"+WPI"
# Batches asked for ahead of the pipeline (received or in flight): with two, a pipeline as fast as the server
# often found half a batch and waited out batch_timeout; four keep it busy (benchmarks/jetstream_consume.py).
PULL_AHEAD = 4


class BoundedEnd:
    """Whether a bounded read of a durable (``stop_at_end``) is over, from what the consumer says once this reader
    has settled everything it took: nothing pending in the stream **and** nothing delivered and unacknowledged
    (``num_ack_pending`` counts records held by another reader, live or dead, and records whose ``ack_wait``
    passed and that wait for redelivery). Records a dead reader held come back after their ``ack_wait``; so
    the read waits while they are outstanding, for as long as their number keeps changing (other readers
    acknowledge them, or they come back to be read here) and ``patience`` (``ack_wait`` and a grace) past its
    last change; then it ends, and ``outstanding`` says how many still await acknowledgement or redelivery.

    >>> end = BoundedEnd(patience=30)
    >>> end.reached(pending=0, ack_pending=3, now=0.0), end.reached(0, 3, 29.0), end.reached(0, 3, 30.0)
    (False, False, True)
    >>> end.outstanding
    3
    >>> end.reached(0, 0, 31.0), end.outstanding
    (True, 0)
    """

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self.outstanding = 0  # records delivered and not acknowledged at the last look
        self._since: float | None = None  # when ``outstanding`` last changed

    @property
    def waiting(self) -> bool:
        """The stream is read and records held elsewhere are waited for."""
        return self._since is not None

    def reached(self, pending: int, ack_pending: int, now: float) -> bool:
        if pending:  # more to read first
            self._since, self.outstanding = None, 0
            return False
        if not ack_pending:
            self._since, self.outstanding = None, 0
            return True
        if self._since is None or ack_pending != self.outstanding:
            self._since, self.outstanding = now, ack_pending
        return now - self._since >= self.patience


class AckMode(str, Enum):
    """How the source acknowledges what the sink wrote (``ack:``): nats-py's ``AckPolicy`` values it uses."""

    EXPLICIT = "explicit"  # every message acked: safe when workers share the durable
    ALL = "all"  # one AckAll per commit: only when this worker is the durable's sole consumer


class JetStreamSource(JetStreamReader, SharedByWorkers, AtLeastOnce):
    """A durable pull consumer (or an ephemeral one, without ``durable``) as batches, each record acknowledged once
    the sink made it durable. N workers of a pool share one durable (``shared_by``: the pipeline's name unless
    given), and so its ``max_ack_pending``: each keeps to its part (``for_worker``)."""

    reads_ordered = False
    # Its records come only as its pull requests ask (``batch_size`` messages, ``max_bytes`` within half of
    # ``pending_bytes_limit``) into a reader without a pending limit: the client never drops one of them.
    drop_advice = ("no record is among them: a pull consumer receives only what it asked for (`batch_size` messages "
                   "within half of `pending_bytes_limit`); these were API replies or max_deliver advisories (a record "
                   "whose advisory was dropped is not dead-lettered): lower `batch_size` or `pending_bytes_limit` if "
                   "the pipeline cannot keep up")
    shared_by = "durable"
    readers = 1  # the workers reading the durable together, this one among them (``for_worker``)
    buffer: RawSubscription

    def __init__(self, subject: str | None = None, **fields: Any) -> None:
        """``fields`` are ``JetStreamSourceConfig``'s (``stream``, ``durable``, ``batch_size``..., the
        connection's ``url``, ``auth``, ``reconnect``...), validated as the YAML is: declared once, there. (An
        ordered consumer is ``OrderedJetStreamSource``, which the config's ``build()`` gives.)"""
        self._init(JetStreamSourceConfig, subject=subject, **fields)

    def _configure(self, config: JetStreamSourceConfig) -> None:
        super()._configure(config)
        batch_size = config.batch_size
        self.ack_mode = AckMode(config.ack)  # the durable's own policy once open, when it has another
        # The workers of a pool share the durable and so its max_ack_pending: each keeps to its part, or the
        # server stops delivering to all of them while each holds records written and not committed yet.
        self.ack_share = max(1, config.max_ack_pending // self.readers)
        # Ask PULL_AHEAD batches ahead, within half of that part (the other half is for records written and not
        # committed yet: ``ack_pressure``); take no more than the rest (``_within_share``).
        ahead = max(batch_size, min(PULL_AHEAD * batch_size, self.ack_share // 2))
        self.take_limit = max(batch_size, self.ack_share - ahead)
        self.pulls = PullRequester(batch_size=batch_size, expires=config.expires, heartbeat=config.heartbeat,
                                   pending_bytes_limit=config.pending_bytes_limit,
                                   left=lambda: None if self.count is None else self.count - self._seen,
                                   idle=self._refresh_lag, lost=self._ensure_consumer)
        # The replies to the pull requests, on one inbox, read as raw protocol tuples (attached at open).
        self.buffer = RawSubscription(batch_size, config.batch_timeout, ahead, status=self.pulls.on_status)
        self.consumer = ""
        self._last_taken = self._lag_checked = 0.0  # when the pipeline last took a batch; the consumer last asked
        self._held_back = False  # the server waits for our acks (max_ack_pending) with messages still to send
        self._end = BoundedEnd(config.ack_wait + END_GRACE)  # stop_at_end: see ``_read_to_end``
        self._taken_since_look = False  # a batch was taken since the consumer was last asked
        self._said_waiting = False  # the log said the read waits for records held elsewhere
        self._bound_reached = False  # the read ended at its bound (stop_at_end, count), not at a stop
        self._outstanding = 0
        self.acked = 0
        self.terminated = 0
        self.in_progress_sent = 0
        self._settled = 0  # acked or terminated: with `count`, the source ends when all it read is settled
        self._settle_event = asyncio.Event()
        self._awaiting_acks = False  # the source waits for the pipeline to commit what it took (``_settling``)
        self._last_ack = ""  # the reply subject of the last message acknowledged: ``_confirm_acks``
        # Records the server gave up on (max_deliver), announced by an advisory: yielded as dead letters
        self.max_deliveries = MaxDeliveries(self.type)

    def for_worker(self, index: int, count: int) -> JetStreamSource:
        """One of ``count`` readers of the durable: the same config, its part of ``max_ack_pending``."""
        if count > 1 and self.ack_mode is AckMode.ALL:
            raise CannotShare("ack", f"'all': one worker's AckAll acknowledges every message up to a stream "
                                     f"sequence, including messages the other {count - 1} worker(s) of the shared "
                                     "durable have not written yet; use ack: explicit (the default) with --workers > 1")
        refuse_embedded(self.config, count)
        if count == self.readers:
            return self
        own = type(self).__new__(type(self))
        own.readers = count  # before it is configured: its part of max_ack_pending
        own._configure(self.config)
        return own

    @property
    def ack_wait(self) -> float:
        return self.config.ack_wait

    @property
    def redelivered(self) -> int:
        return self._redelivered

    @property
    def outstanding(self) -> int:
        """Records of the durable still awaiting acknowledgement or redelivery when the read ended at its bound
        (``stop_at_end``: held by another reader past the wait, ``BoundedEnd``; ``count``, or either: what this
        reader took and could not settle); 0 before that, and for a read that was stopped or has no bound, but for
        records the server gave up on (``max_deliver``) too late to be dead-lettered before the run ended."""
        return self._outstanding

    @property
    def repulls(self) -> int:
        """Pull requests made again (after a reconnect, or a request unanswered for two heartbeats)."""
        return self.pulls.repulls

    def wants_commit(self) -> bool:
        """The ``count`` was read, this worker took its part of ``max_ack_pending`` (``_within_share``), the
        server holds messages back until acks come (``_refresh_lag``), or the source waits for its acks
        (``_settling``: at its ``count``, at the end of the stream)."""
        return ((self.count is not None and self._seen >= self.count) or self._held_back or self._awaiting_acks
                or self._seen - self._settled >= self.take_limit)

    @property
    def ack_pressure(self) -> int:
        """Unacknowledged records after which the pipeline should commit: half of this worker's part of
        ``max_ack_pending``."""
        return max(1, self.ack_share // 2)

    # --- setup ---------------------------------------------------------------------------------

    def _pull_config(self, name: str | None) -> Any:
        from nats.js import api

        config = self.config
        cfg = api.ConsumerConfig(
            durable_name=config.durable, name=name, ack_wait=config.ack_wait,
            ack_policy=api.AckPolicy(self.ack_mode.value),
            max_deliver=config.max_deliver if config.max_deliver > 0 else -1, max_ack_pending=config.max_ack_pending,
            filter_subject=config.subject, max_waiting=512,
            inactive_threshold=None if config.durable else 300.0,
        )
        self._deliver_config(cfg)
        return cfg

    async def _open_consumer(self, js: Any) -> None:
        import nats.js.errors
        from nats.js import api

        name = self.config.durable
        cfg = self._pull_config(name)
        existing = None
        if name:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                existing = await self._api(lambda: js.consumer_info(self.stream, name))
        try:
            if existing is None:
                info = await self._api(lambda: js.add_consumer(self.stream, cfg))
            else:
                # Deliver policy and start position cannot change on an existing durable: keep them.
                old = existing.config
                for keep in ("deliver_policy", "opt_start_seq", "opt_start_time", "filter_subject"):
                    setattr(cfg, keep, getattr(old, keep))
                if old.ack_policy != cfg.ack_policy:  # the server cannot change it: use the durable's
                    log.warning("durable %s acknowledges with ack policy %s, not %s: using it as it is", name,
                                old.ack_policy.value, cfg.ack_policy.value)
                    cfg.ack_policy = old.ack_policy
                    self.ack_mode = AckMode.ALL if old.ack_policy == api.AckPolicy.ALL else AckMode.EXPLICIT
                if old.filter_subject != self.config.subject and self.config.subject:
                    log.warning("durable %s filters %r, not %r: using it as it is", name, old.filter_subject,
                                self.config.subject)
                info = await self._api(lambda: js.add_consumer(self.stream, cfg))
        except nats.js.errors.APIError as exc:
            raise WirepipeError(f"cannot create consumer {name or '(ephemeral)'} on stream {self.stream}: "
                                f"{exc.description}") from None
        self.consumer = info.name
        reply_to = self.nc.new_inbox()
        self.sub = await self.nc.subscribe(reply_to, pending_msgs_limit=self.buffer.max_buffered + 1024,
                                           pending_bytes_limit=0)
        self.buffer.attach(self.nc, self.sub)
        self.conn.on_reconnect(self.pulls.repull)
        assert self.stream is not None  # found by _wait_for_stream
        self.pulls.start(self.nc, self.buffer, self.stream, self.consumer, reply_to, self.stopping)
        if info.config.max_deliver and info.config.max_deliver > 0:
            try:
                await self.max_deliveries.start(self.conn, self.stream, self.consumer)
            except Exception as exc:  # the server did not answer the flush: the subscription may still be there
                log.warning("%s: the max-deliveries advisory subscription was not confirmed (%s)", self.consumer,
                            type(exc).__name__)

    # --- receiving ---------------------------------------------------------------------------------

    async def _refresh_lag(self) -> None:
        """The lag is the pending count a message's metadata carried, so it stands still once messages stop
        coming: when nothing came for a while and the last count was not 0, ask the consumer (workers of a
        pool share the durable, and one of them may have taken the last messages). (A bounded read asks it
        itself, in ``batches``: ``_read_to_end``.)"""
        now = time.monotonic()
        if (not self._lag or self.config.stop_at_end or now - self._last_taken < LAG_REFRESH
                or now - self._lag_checked < LAG_REFRESH or not self.nc.is_connected):
            return
        info = await self._consumer_info()
        if info is not None and time.monotonic() - self._last_taken >= LAG_REFRESH:  # no message came meanwhile
            self._learn(info)

    async def _consumer_info(self) -> Any:
        """The durable's state from the server, or None when it does not answer now (a cluster electing a
        leader, a reconnect: the next look asks again)."""
        self._lag_checked = time.monotonic()
        self._taken_since_look = False
        try:
            return await self.nc.jetstream().consumer_info(self.stream, self.consumer, timeout=2)
        except Exception as exc:
            log.debug("consumer info failed: %s", type(exc).__name__)
            return None

    def _learn(self, info: Any) -> None:
        """The lag from the consumer's answer, and whether the server holds messages back for acks: the
        durable's readers together hold ``max_ack_pending`` unacknowledged. A pool divides it between its
        workers (``ack_share``), but processes of other pools (replicas) on the same durable are not known
        here: then the source asks for a commit (``wants_commit``) rather than wait for the flush interval."""
        self._lag = int(info.num_pending)
        if info.num_pending and info.num_ack_pending >= self.config.max_ack_pending:
            log.debug("%s: the server holds %d messages back until acks come: asking for a commit",
                      self.consumer, info.num_pending)
            self._held_back = True

    async def _read_to_end(self) -> bool:
        """``stop_at_end`` on a durable: True once the read is over (``BoundedEnd``). Asked while nothing is
        buffered: at once when the last message said the stream was delivered, else once a ``LAG_REFRESH``
        (a worker of a pool that another worker left the last messages to never sees a last message of its own).

        What this reader took is settled first (the pipeline commits it: ``wants_commit``), so what the server
        still counts as unacknowledged is held elsewhere: by another reader, live (a pool's worker, committing
        at its pace) or dead (its records come back after ``ack_wait``, and are read here). No reader waits on
        another: each settles its own before it looks."""
        if len(self.buffer) or self.stopping.is_set():
            return False
        if not ((self._lag == 0 and self._taken_since_look) or time.monotonic() - self._lag_checked >= LAG_REFRESH):
            return False
        await self._settling(0)
        if len(self.buffer) or self.stopping.is_set():  # redelivered meanwhile: read it first
            return False
        info = await self._consumer_info()
        if info is None:
            return False
        self._learn(info)
        end = self._end
        was_waiting = end.waiting
        reached = end.reached(int(info.num_pending), int(info.num_ack_pending), time.monotonic())
        # The status line says what the read waits for: "waiting for 2,800 unacknowledged records (...)".
        self.waiting = (f"{end.outstanding:,} unacknowledged records (held by another reader, or redelivered "
                        "after ack_wait)" if end.waiting and not reached else None)
        if not reached:
            # Said at the second look: at the first, what the server was sending this reader may still be on its way.
            if was_waiting and not self._said_waiting:
                self._said_waiting = True
                log.info("%s: stream %s is read; %d record(s) delivered and not acknowledged yet (another reader "
                         "holds them, or they come back after ack_wait): waiting for them", self.consumer,
                         self.stream, end.outstanding)
            return False
        if end.outstanding:
            log.warning("%s: %d record(s) still awaiting acknowledgement or redelivery after %.0fs without a "
                        "change (ack_wait %.0fs): another reader holds them; a later run reads them once they come "
                        "back", self.consumer, end.outstanding, end.patience, self.ack_wait)
        elif self._said_waiting:
            log.info("%s: every record is acknowledged", self.consumer)
        self._outstanding = end.outstanding
        return True

    async def _ensure_consumer(self) -> None:
        """Re-create a consumer the server lost (memory storage, a reset): same name and settings."""
        import nats.js.errors

        js = self.nc.jetstream()
        try:
            await js.consumer_info(self.stream, self.consumer)
        except nats.js.errors.NotFoundError:
            log.warning("consumer %s is gone from stream %s: re-creating it", self.consumer, self.stream)
            await js.add_consumer(self.stream, self._pull_config(self.consumer))
        except Exception as exc:  # the server is still recovering: the next heartbeat check tries again
            log.debug("consumer check failed: %s", type(exc).__name__)

    async def batches(self) -> AsyncIterator[Batch]:
        if self.sub is None:  # stopped while waiting for JetStream at open
            return
        bounded = self.config.stop_at_end
        given_up = self.max_deliveries
        while True:
            if given_up.announced and not self.stopping.is_set() and self.stream is not None:
                letters = await given_up.take(self.nc.jetstream(), self.stream)
                if letters:
                    yield Batch([], rejected=letters)
            if self.count is not None and self._seen >= self.count and not await self._count_settled():
                self._bound_reached = not self.stopping.is_set()
                return
            if bounded and await self._read_to_end():
                # The advisory of a record the server gave up on comes as the record leaves num_ack_pending:
                # a round trip lets one sent just before arrive, and its dead letter is yielded before the end.
                with contextlib.suppress(Exception):
                    await self.conn.flush(5.0)
                if given_up.announced:
                    continue
                self._bound_reached = True
                return
            left = self.config.batch_size if self.count is None else self.count - self._seen
            await self._within_share()
            got = await self._take(left, LAG_REFRESH, given_up.arrived)
            if got is None:
                if (bounded or given_up.announced) and not self.stopping.is_set():
                    continue  # nothing came for a while: look at the consumer again; or a dead letter to yield
                return
            self._seen += len(got)
            self._last_taken = time.monotonic()
            self._taken_since_look = True
            self.pulls.taken(got)
            yield self._batch(got)

    async def _count_settled(self) -> bool:
        """``count`` records were read: wait until they are settled; False when done, True if some came back."""
        await self._settling(0)
        return self._seen < self.count if self.count is not None and not self.stopping.is_set() else False

    async def _within_share(self) -> None:
        """Take no more while the records taken and not settled fill this worker's part of ``max_ack_pending``
        less what is asked ahead: past it the server stops delivering, to the pool's other workers too. The
        pipeline commits meanwhile (``wants_commit``), whatever it wrote of them."""
        await self._settling(self.take_limit - 1)

    async def _settling(self, unsettled: int) -> None:
        """Until at most ``unsettled`` records taken are not yet settled (acked or terminated), or stopping; the
        pipeline is asked to commit meanwhile (``wants_commit``)."""
        self._awaiting_acks = True
        try:
            while self._seen - self._settled > unsettled and not self.stopping.is_set():
                self._settle_event.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._settle_event.wait(), 0.5)
        finally:
            self._awaiting_acks = False

    def _batch(self, got: Received) -> Batch:
        batch = super()._batch(got)
        batch.meta["ack"] = got.replies
        return batch

    # --- settling ------------------------------------------------------------------------------

    async def _send_all(self, replies: Sequence[str | None], body: bytes) -> int:
        """``body`` to each reply subject (None entries skipped); how many were sent."""
        return await publish_many(self.nc, replies, body)

    async def ack(self, batch: Batch) -> None:
        """Acknowledge a batch the sink made durable: every message (``ack: explicit``, one write of
        protocol lines), or only the one with the highest stream sequence (``ack: all``: the server
        acks every pending message up to that sequence). That is safe for a worker that owns its
        durable because first deliveries come in stream order, batches are acked in that order, and
        a batch the sink failed is retried in place (kept with ``+WPI``), never given back, so no
        later batch is acked before it is written."""
        replies = batch.meta.get("ack")
        if not replies:
            return
        if self.ack_mode is AckMode.ALL:
            n = sum(1 for r in replies if r)  # unpacked records share their message's handle (None after the first)
            seqs = batch.meta.get("stream_seq") or ()
            if seqs:
                # AckAll acks up to a *stream* sequence: send the highest written (a message the server
                # redelivered after ack_wait can sit in a later batch with a lower one).
                i = max(range(len(seqs)), key=seqs.__getitem__)
                while i > 0 and not replies[i]:
                    i -= 1  # records unpacked from one message: its handle is on the first
                await self._send_all([replies[i]], _ACK)
                self._last_ack = replies[i] or self._last_ack
        else:
            n = await self._send_all(replies, _ACK)  # the handles (records unpacked from one message share one)
            self._last_ack = next((r for r in reversed(replies) if r), self._last_ack)
        self.acked += n
        self._held_back = False
        self._settled_more(n)

    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        """Dead-lettered records: terminate them (the dead letter holds them; no redelivery); those the server gave
        up on (``max_deliver``) are removed from a work-queue stream (``MaxDeliveries.settle``).

        With ``ack: all`` a term also acks every message up to its stream sequence: the pipeline settles
        dead letters at a commit, after the batches they came from were written and acked."""
        if self.stream is not None and self.nc is not None:
            await self.max_deliveries.settle(self.nc.jetstream(), self.stream, rejected)
        replies = [r.meta.get("ack") for r in rejected]
        if any(replies):
            await self._send_all(replies, _TERM)
            n = sum(1 for r in replies if r)
            self.terminated += n
            self._settled_more(n)

    def _settled_more(self, n: int) -> None:
        self._settled += n
        self._settle_event.set()

    async def in_progress(self, batches: list[Batch]) -> None:
        """The sink is unavailable: ``+WPI`` every record held (in these batches and in our buffer) so the
        server extends their ack deadline instead of redelivering them (no delivery is counted)."""
        replies = [r for b in batches for r in (b.meta.get("ack") or ()) if r]
        replies += self.buffer.waiting_replies()  # received, not yet taken by the pipeline
        if replies and self.nc is not None and self.nc.is_connected:
            await self._send_all(replies, _WPI)
            self.in_progress_sent += len(replies)

    async def _confirm_acks(self) -> None:
        """Wait until the server has applied every ack and term sent: one ack sent again with a reply subject (as
        nats-py's ``ack_sync``), which the server answers after the acks before it (it answers a repeated ack
        too). Without it the process could end while the server had not yet counted its last acks, and a
        look at the consumer right after the run (a script, the next run) would still find them pending."""
        if not self._last_ack or self.nc is None or not self.nc.is_connected:
            return
        try:
            await self.nc.request(self._last_ack, _ACK, timeout=5)
        except Exception as exc:
            log.warning("%s: the server did not confirm the last acknowledgements (%s): they may be delivered again",
                        self.consumer, type(exc).__name__)

    async def close(self) -> None:
        await self.pulls.stop()
        await self.max_deliveries.stop()
        if self._bound_reached:  # what it took and could not settle (a drain cut short) comes back later
            self._outstanding += max(0, self._seen - self._settled)
        unlettered = self.max_deliveries.announced
        if unlettered:  # given up by the server as the run stopped: in no dead letter, counted here
            self._outstanding += len(unlettered)
            log.error("%s: %d record(s) delivered max_deliver times were not dead-lettered before the run ended "
                      "(stream sequences %s): the server delivers them no more; they may still be in stream %s",
                      self.consumer, len(unlettered), ", ".join(str(seq) for seq, _ in unlettered[:20]), self.stream)
        await self._confirm_acks()
        if self.nc is not None and self.nc.is_connected and self.sub is not None:
            # Messages received but never handed to the pipeline: give them back now, not after ack_wait.
            # Let what the server is still sending for our pull requests arrive first (while any is in flight,
            # until the queue stops growing, at most a second), then unsubscribe and nak everything queued.
            with contextlib.suppress(Exception):
                deadline = time.monotonic() + 1.0
                seen = -1
                while self.pulls.in_flight and time.monotonic() < deadline and self.buffer.received != seen:
                    seen = self.buffer.received
                    await asyncio.sleep(0.05)
                await self.nc.flush(timeout=2)
                await self.sub.unsubscribe()
            self.sub = None
            left = self.buffer.drop_replies()
            with contextlib.suppress(Exception):
                await self._send_all(left, b"-NAK")
                await self.nc.flush(timeout=5)
        await self._unsubscribe()
        self.buffer.detach()
        await self.conn.close()


class JetStreamSourceConfig(NatsConnectionConfig, SourceLimits):
    """``source: {type: jetstream, stream: POINTS, durable: points-worker}``"""

    type: Literal["jetstream"]
    stream: StreamName | None = Field(default=None, description="default: the stream that stores `subject`")
    subject: SubjectPattern | None = Field(default=None, description="filter subject")
    durable: ConsumerName | None = Field(default=None, description="durable consumer name; unset: an ephemeral consumer")
    ordered: bool = Field(default=False, description="ordered consumer (replay): no acks, no durable")
    deliver: Literal["all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"] = Field(
        default="all", description="where a new consumer starts in the stream")
    start_seq: StreamSequence | None = Field(default=None, description="deliver: by_start_sequence: the first stream sequence")
    start_time: dt.datetime | None = Field(default=None, description="deliver: by_start_time: the first time (ISO 8601)")
    batch_size: Int64 = Field(default=1000, ge=1, description="messages per pull request / batch")
    batch_timeout: Duration = Field(default=0.005, description="wait this long for a full batch once one record is in")
    max_ack_pending: Int64 = Field(default=20000, ge=1, description="records delivered and not yet acknowledged, at "
                                 "most, by every reader of the durable together (the server stops delivering past "
                                 "it); a pool's workers divide it")
    ack_wait: Nanoseconds = Field(default=30.0, gt=0, description="a record not acknowledged in this time is delivered again (a held batch is kept in progress meanwhile)")
    max_deliver: Int64 = Field(default=5, ge=-1, description="deliveries of one record at most, then it goes to the dead letter with the reason; -1: no limit")
    expires: Nanoseconds = Field(default=30.0, gt=0, description="lifetime of one pull request")
    heartbeat: Nanoseconds = Field(default=5.0, ge=0, description="idle heartbeat of pull requests; 0 disables")
    stop_at_end: bool = Field(default=False, description="stop once every message in the stream was delivered and "
                              "(a durable) acknowledged: records another reader holds are waited for up to ack_wait")
    ack: Literal["explicit", "all"] = Field(
        default="explicit", description="explicit: every message acked (safe when workers share the durable); "
        "all: one AckAll per commit, only when this worker is the durable's sole consumer")
    pending_bytes_limit: Size = Field(default=64 * 1024 * 1024, description="bytes buffered plus asked for "
                                      "stay within half of this (pull requests carry max_bytes)")

    @model_validator(mode="after")
    def _start(self) -> JetStreamSourceConfig:
        if self.deliver == "by_start_sequence" and self.start_seq is None:
            raise ValueError("deliver: by_start_sequence needs start_seq")
        if self.deliver == "by_start_time" and self.start_time is None:
            raise ValueError("deliver: by_start_time needs start_time (ISO 8601)")
        if self.ordered and self.durable:
            raise ValueError("an ordered consumer is never durable: drop `durable` or `ordered`")
        if self.stream is None and self.subject is None:
            raise ValueError("give `stream` or `subject`")
        if self.heartbeat and self.heartbeat * 2 >= self.expires:
            raise ValueError("heartbeat must be less than half of expires")
        if self.ack == "all" and self.ordered:
            raise ValueError("an ordered consumer has no acks: drop `ack: all`")
        return self

    def build(self) -> JetStreamReader:
        return (OrderedJetStreamSource if self.ordered else JetStreamSource).from_config(self)


SOURCES = {"jetstream": JetStreamSourceConfig}
RANK = 5  # where its types come in the "allowed" lists (connectors/__init__.py)
