"""The ``jetstream`` source's ordered consumer (``ordered: true``): nats-py's ordered push consumer, no acks, gaps
repaired by the client, from a start sequence or time: the replay path (``wirepipe tap``, ``capture`` of a stream,
a pipeline replaying a stream).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ...core.batch import Batch
from ...core.errors import CannotShare, WirepipeError
from ..connector import Commits
from .jetstream_reader import JetStreamReader
from .reader import Received, SubscriptionReader

if TYPE_CHECKING:
    from .jetstream_source import JetStreamSourceConfig

_WORKQUEUE_NEEDS_ACK = 10098  # the server's err_code: "workqueue stream requires explicit ack"


class OrderedJetStreamSource(JetStreamReader, Commits):
    """An ordered consumer as batches: the stream (from ``deliver``'s start) to this one reader, in order, nothing
    acknowledged and nothing delivered again; with ``stop_at_end`` it ends at the last message there was.

    It has no acks to send, and nothing it delivered comes back (through a sink failure the run loop holds its
    records), but it has a commit cadence (``Commits``): a commit every ``ack_pressure`` records (half of
    ``max_ack_pending``, as a durable's), which is where a capture of a backlog completes its files
    (``capture_config`` sizes ``max_ack_pending`` for it).
    """

    reads_ordered = True
    buffer: SubscriptionReader

    def __init__(self, config: JetStreamSourceConfig) -> None:
        """From a validated config with ``ordered: true``: what ``JetStreamSourceConfig.build()`` (YAML, and
        ``wirepipe.jetstream_source(..., ordered=True)``) returns."""
        self._configure(config)

    def _configure(self, config: JetStreamSourceConfig) -> None:
        super()._configure(config)
        self.buffer = SubscriptionReader(config.batch_size, config.batch_timeout, max_buffered=config.batch_size)

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
                                                            pending_msgs_limit=4 * self.config.batch_size + 65536))
        except nats.js.errors.APIError as exc:
            hint = ("; it is a work queue (each message goes to one consumer, which acknowledges it): read its "
                    "subjects on core NATS to see messages as they are published"
                    if exc.err_code == _WORKQUEUE_NEEDS_ACK else "")
            raise WirepipeError(f"cannot create an ordered consumer on stream {self.stream}: "
                                f"{exc.description}{hint}") from None
        self.buffer.attach(self.sub)  # nats-py's ordered consumer handles its status messages
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
        while True:
            if self.count is not None and self._seen >= self.count:  # no acks to settle: read is done
                return
            if self._at_end.is_set() and not len(self.buffer):
                return
            left = self.config.batch_size if self.count is None else self.count - self._seen
            got = await self._take(left, None)
            if got is None:
                return
            self._seen += len(got)
            yield self._batch(got)

    def _batch(self, got: Received) -> Batch:
        batch = super()._batch(got)
        if self.config.stop_at_end and self._lag == 0:
            self._at_end.set()  # no acks: nothing it was given comes back
        return batch
