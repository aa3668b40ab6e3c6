"""The ``jetstream`` source's ordered consumer (``ordered: true``): nats-py's ordered push consumer, no acks, gaps
repaired by the client, from a start sequence or time: the replay path (``wirepipe tap``, ``capture`` of a stream,
a pipeline replaying a stream).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...core.batch import Batch
from ...core.errors import CannotShare, WirepipeError
from ..connector import Commits
from .jetstream_reader import JetStreamReader, consumer_sequences
from .reader import Received, SubscriptionReader, reset_ordered_consumer

log = logging.getLogger("wirepipe.jetstream")

if TYPE_CHECKING:
    from .jetstream_source import JetStreamSourceConfig

_WORKQUEUE_NEEDS_ACK = 10098  # the server's err_code: "workqueue stream requires explicit ack"
# Messages nats-py holds for the reader beyond four batches; past them it drops what the server pushes (a slow
# consumer) and the reader reads them again (``_in_order``).
PENDING_MSGS = 65536
LOOK_AFTER = 1.0  # seconds without a message after which a bounded read looks for a drop at the tail


class OrderedJetStreamSource(JetStreamReader, Commits):
    """An ordered consumer as batches: the stream (from ``deliver``'s start) to this one reader, in order, nothing
    acknowledged and nothing delivered again; with ``stop_at_end`` it ends at the last message there was.

    A message nats-py drops (its queue full: a slow consumer) is one its ordered consumer counts as delivered, so
    nats-py never repairs that gap; the reader does: it keeps what came before the gap in the consumer sequence and
    resets the consumer to the stream sequence after the last message it took (``_in_order``).

    It has no acks to send, and nothing it delivered comes back (through a sink failure the run loop holds its
    records), but it has a commit cadence (``Commits``): a commit every ``ack_pressure`` records (half of
    ``max_ack_pending``, as a durable's), which is where a capture of a backlog completes its files
    (``capture_config`` sizes ``max_ack_pending`` for it).
    """

    reads_ordered = True
    drops_read_again = True  # status, summary and Prometheus: ``reread``, never ``dropped`` (nothing is lost)
    drop_advice = ("the ordered consumer reads them again from the stream, so none is lost; to avoid the re-reads, "
                   "speed up the pipeline or read with a durable consumer (drop `ordered: true`), which pulls only "
                   "what the pipeline takes")
    buffer: SubscriptionReader

    def __init__(self, config: JetStreamSourceConfig) -> None:
        """From a validated config with ``ordered: true``: what ``JetStreamSourceConfig.build()`` (YAML, and
        ``wirepipe.jetstream_source(..., ordered=True)``) returns."""
        self._configure(config)

    def _configure(self, config: JetStreamSourceConfig) -> None:
        super()._configure(config)
        self.buffer = SubscriptionReader(config.batch_size, config.batch_timeout, max_buffered=config.batch_size)
        self._last_seq = 0  # the stream sequence of the last message taken (a reset reads on from the next)
        self._next_delivery = 1  # the consumer sequence the next message has (1 after a reset)
        self._drops_seen = 0  # the connection's slow-consumer drops when the order was last known whole
        self._resumed = False  # reset by ``_read_again``: the next message starts a consumer sequence at 1
        self.rereads = 0  # resets that read dropped messages again (one warning for the first, a summary at close)

    def for_worker(self, index: int, count: int) -> OrderedJetStreamSource:
        """One reader only: an ordered consumer delivers the whole stream to each."""
        if count > 1:
            raise CannotShare("ordered", f"true: an ordered consumer delivers the whole stream to each reader, so "
                                         f"--workers {count} would process every record {count} times; use a "
                                         "durable (drop `ordered`) or --workers 1")
        return self

    @property
    def ack_pressure(self) -> int:
        """Records after which the run loop commits: half of ``max_ack_pending``, as for a durable."""
        return max(1, self.config.max_ack_pending // 2)

    def wants_commit(self) -> bool:
        """The ``count`` was read."""
        return self.count is not None and self._seen >= self.count

    async def _open_consumer(self, js: Any) -> None:
        import nats.js.errors
        from nats.js import api

        cfg = api.ConsumerConfig()
        self._deliver_config(cfg)
        try:
            self.sub = await self._api(lambda: js.subscribe(self.config.subject or ">", stream=self.stream,
                                                            ordered_consumer=True, config=cfg,
                                                            pending_msgs_limit=4 * self.config.batch_size
                                                            + PENDING_MSGS))
        except nats.js.errors.APIError as exc:
            hint = ("; it is a work queue (each message goes to one consumer, which acknowledges it): read its "
                    "subjects on core NATS to see messages as they are published"
                    if exc.err_code == _WORKQUEUE_NEEDS_ACK else "")
            raise WirepipeError(f"cannot create an ordered consumer on stream {self.stream}: "
                                f"{exc.description}{hint}") from None
        self.buffer.attach(self.sub)  # nats-py's ordered consumer handles its status messages
        self._drops_seen = self.conn.stats.slow_consumer_drops
        await self._check_empty()

    async def _check_empty(self) -> None:
        """``stop_at_end`` on an empty stream (or past its end): nothing will come."""
        if not self.config.stop_at_end:
            return
        info = await self._api(self.sub.consumer_info)
        # An ordered consumer is pushed to: what the server delivered before this answer is on its way to the
        # reader, not pending any more, and its last message's metadata ends the run (``_batch``).
        pushed = info.delivered is not None and bool(info.delivered.consumer_seq)
        if not info.num_pending and not pushed:
            self._at_end.set()

    async def batches(self) -> AsyncIterator[Batch]:
        if self.sub is None:  # stopped while waiting for JetStream at open
            return
        bounded = self.config.stop_at_end
        while True:
            if self.count is not None and self._seen >= self.count:  # no acks to settle: read is done
                return
            if self._at_end.is_set() and not len(self.buffer):
                return
            left = self.config.batch_size if self.count is None else self.count - self._seen
            got = await self._take(left, LOOK_AFTER if bounded else None)
            if got is None:
                if self.stopping.is_set() or self._at_end.is_set() or not bounded:
                    return
                if self.conn.stats.slow_consumer_drops != self._drops_seen:  # the tail was dropped: nothing
                    await self._read_again()                                 # after it shows the gap
                continue
            got = await self._in_order(got)
            if not got.data:
                continue
            self._seen += len(got.data)
            yield self._batch(got)

    async def _in_order(self, got: Received) -> Received:
        """``got`` up to its first message after a gap in the consumer sequence, which only a message nats-py
        dropped leaves (a reset starts again at 1); past a gap, or with nothing queued after a drop (the drop was
        at the end of what came), the consumer is reset to read on from the last message kept. Without a drop on
        the connection since the order was last known whole, ``got`` as it is."""
        try:
            if self.conn.stats.slow_consumer_drops == self._drops_seen:  # the last message: no pass over a batch
                (last,), (delivery,) = consumer_sequences(got.replies[-1:])
                self._last_seq, self._next_delivery = last, delivery + 1
                return got
            seqs, deliveries = consumer_sequences(got.replies)
        except (IndexError, ValueError):  # not JetStream's reply subjects (as ``_batch`` reads them): as they came
            return got
        expected, kept = self._next_delivery, len(seqs)
        for i, (seq, delivery) in enumerate(zip(seqs, deliveries, strict=True)):
            if delivery != expected and not (delivery == 1 and self._resumed):
                kept = i
                break
            self._resumed = False
            self._last_seq, expected = seq, delivery + 1
        self._next_delivery = expected
        if kept == len(seqs) and len(self.buffer):  # the drop is later in the stream: the next messages show it
            return got
        await self._read_again()
        return Received(got.data[:kept], got.subjects[:kept], got.headers[:kept], got.replies[:kept],
                        got.times[:kept])

    async def _read_again(self) -> None:
        """Reset the ordered consumer to the message after the last one taken, dropping what the client holds
        (read again from the new consumer). Emptying the queue and removing the old subscription happen without
        a pause between them, so no message of the old consumer follows."""
        self._drops_seen = self.conn.stats.slow_consumer_drops
        self.rereads += 1
        if self.rereads == 1:  # the later ones are counted (``reread``) and summed up at close (``close``)
            log.warning("ordered consumer of stream %s: the client dropped messages (a slow consumer): reading again "
                        "from stream sequence %d; none is lost (counted as reread, not dropped; later re-reads "
                        "are summed up when the source closes)", self.stream, self._last_seq + 1)
        self.buffer.drop_messages()
        self._resumed, self._next_delivery = True, 1
        await reset_ordered_consumer(self.sub, self._last_seq + 1)

    async def close(self) -> None:
        await super().close()
        if self.rereads > 1:
            log.warning("ordered consumer of stream %s: read the stream again %d times, for %d message(s) the client "
                        "dropped (none lost)", self.stream, self.rereads, self.conn.stats.slow_consumer_drops)

    def _batch(self, got: Received) -> Batch:
        batch = super()._batch(got)
        if self.config.stop_at_end and self._lag == 0:
            self._at_end.set()  # no acks: nothing it was given comes back
        return batch
