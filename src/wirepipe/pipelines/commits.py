"""The ack ledger and the commit: a record is acknowledged only once the sink has made it durable.

The run loop writes batches to the sink and notes each in the ledger (``wrote``); records it
dead-letters wait there too (``rejected``). Every ``flush_interval``, sooner when the source's
unacknowledged records reach its ``ack_pressure`` or the source asks (``wants_commit``), and at
the drain, the loop *commits* (``commit``): it flushes the sink (durable: see each sink),
dead-letters what the sink refused late (JetStream: at its publish ack), flushes the dead-letter
sink, and only then acknowledges the batches written before the flush and settles (terminates)
the dead-lettered records (``AtLeastOnce``). A flush that fails is retried
(``sink_retry.py``) with the written records still unacknowledged. A source that cannot
redeliver keeps only its batches' meta in the ledger (their ack handles), not their records.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..connectors.connector import AtLeastOnce, Commits, RefusesLate, Sink, Source
from ..core.batch import PACKED, Batch, Rejected
from ..wire import Header

if TYPE_CHECKING:
    from .sink_retry import SinkRetry
    from .stats import RunStats

log = logging.getLogger("wirepipe")


def commit_interval(flush_interval: float, source: Source) -> float:
    """``flush_interval``, and for a source that takes acks at most half its ``ack_wait``: records held longer than
    ``ack_wait`` before their commit would be delivered again (duplicates) while the run is healthy."""
    if isinstance(source, AtLeastOnce) and source.ack_wait and flush_interval > source.ack_wait / 2:
        return float(source.ack_wait) / 2
    return flush_interval


class AckLedger:
    """What was written and is not committed yet, what was dead-lettered and is not settled yet, and the commit
    that settles both (see the module doc)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        # What the source declares, asked once: whether its records come back until acknowledged (the ledger
        # keeps them until the commit), and when it asks for a commit of its own
        self.redelivers = isinstance(source, AtLeastOnce)
        self.asks = source.wants_commit if isinstance(source, Commits) else None
        self.written: list[tuple[Batch, int]] = []  # written, not yet acknowledged: (batch, records)
        self.records = 0  # the values (messages) of ``written``: what the run holds unacknowledged
        self.written_records = 0  # the records in them (more after ``pack``): what ``acked`` counts
        self.unsettled: list[list[Rejected]] = []  # dead-lettered, settled (ack/term) at the next commit
        self.last = time.monotonic()  # when the last commit ended

    @property
    def pending(self) -> bool:
        return bool(self.written or self.unsettled)

    def wrote(self, batch: Batch) -> None:
        """The sink took ``batch``: it is acknowledged at the next commit."""
        n = len(batch.values)
        self.written_records += batch.record_count()
        if not self.redelivers:
            # Only its meta (ack handles) is needed at the commit: do not hold the records until then,
            # or a long flush_interval (a capture completing a file per minute) holds a minute of data.
            batch = Batch([], meta=batch.meta)
        self.written.append((batch, n))
        self.records += n

    def dropped(self, taken: Sequence[Any], seqs: Sequence[int] | None, kept: Sequence[Any] | None,
                rejected: list[Any]) -> None:
        """Acknowledge at the next commit, with the batch they came in, the records the operators dropped (a
        filter, records joined into fewer): their ack handles are among the source's (``taken``, ``seqs``)
        but neither in what was written (``kept``) nor in the dead letters (``rejected``). Operators work a
        batch at a time, so what they did not pass on is gone, not held for a later batch. Without this the
        server would deliver those records again after every ``ack_wait``, up to ``max_deliver`` times."""
        settled = len(kept) - kept.count(None) if kept else 0
        if settled + len(rejected) >= len(taken) - taken.count(None):
            return  # every handle is written or dead-lettered (the common case: no pass over the column)
        accounted = set(kept or ())
        accounted.update(rejected)
        gone = [i for i, handle in enumerate(taken) if handle is not None and handle not in accounted]
        meta: dict[str, Any] = {"ack": [taken[i] for i in gone]}
        if seqs:
            meta["stream_seq"] = [seqs[i] for i in gone]
        self.written.append((Batch([], meta=meta), 0))

    def rejected(self, rejected: list[Rejected]) -> None:
        """``rejected`` went to the dead letter: settled at the next commit, after the dead letter is flushed."""
        self.unsettled.append(rejected)

    @staticmethod
    async def _fall_back(refused: list[Rejected], dead_letter: Sink, fallback: Sink, retry: SinkRetry,
                         stats: RunStats) -> None:
        """Dead letters ``dead_letter`` refused, written to ``fallback`` and flushed (never dropped)."""
        log.error("%d dead letter(s) refused by %s (%s): written to %s instead", len(refused), dead_letter.name,
                  refused[0].error, getattr(fallback, "path", fallback.name))
        # The envelope keeps one reason: the refusal, followed by why the record was a dead letter at all.
        letters = [dataclasses.replace(r, error=f"{r.error}; a dead letter of {r.headers.get(Header.STAGE, '?')}: "
                                                f"{r.headers.get(Header.ERROR, '?')}") if r.headers else r
                   for r in refused]
        await retry.retry(fallback, lambda: fallback.write_rejected(letters), stats)
        await retry.retry(fallback, fallback.flush, stats)

    def due(self, interval: float, pressure: int | None) -> bool:
        """Time for a commit: ``interval`` since the last, the source asks for one, or ``pressure`` records wait."""
        return (time.monotonic() - self.last >= interval or (self.asks is not None and self.asks())
                or (pressure is not None and self.records >= pressure))

    async def commit(self, sink: Sink, dead_letter: Sink | None, retry: SinkRetry, stats: RunStats,
                     late: Callable[[list[Rejected]], Awaitable[None]], fallback: Sink) -> bool:
        """Flush the sink (durable), then ack what was written before the flush and settle the dead letters;
        ``late(records)`` dead-letters what the sink refused after it took it. False when nothing was pending.
        Dead letters the destination refuses for themselves go to ``fallback`` (the default dead-letter file)
        before their source records are settled.

        A failed flush is retried (the sink keeps what it was given, see ``SpoolingFile``) until it works; the
        written records stay unacknowledged meanwhile.
        """
        self.last = time.monotonic()
        if not self.pending:
            return False
        await retry.retry(sink, sink.flush, stats)
        self.last = time.monotonic()
        written, self.written, self.records = self.written, [], 0
        records, self.written_records = self.written_records, 0
        refused_late = sink.take_rejected() if isinstance(sink, RefusesLate) else []
        if refused_late:  # counted out when the sink took them; refused since (JetStream: at their ack)
            stats.records_out -= sum(r.meta.get(PACKED, 1) for r in refused_late)
            stats.messages_out -= len(refused_late)
            await late(refused_late)
        if dead_letter is not None and self.unsettled:
            await retry.retry(dead_letter, dead_letter.flush, stats)
            refused = dead_letter.take_rejected() if isinstance(dead_letter, RefusesLate) else []
            if refused:  # the dead-letter destination refused them for themselves (JetStream: no stream stores them)
                await self._fall_back(refused, dead_letter, fallback, retry, stats)
        source = self.source
        if isinstance(source, AtLeastOnce):
            for batch, _ in written:
                await source.ack(batch)
            for rejected in self.unsettled:
                await source.settle_rejected(rejected)
        stats.acked += records
        stats.acked_messages += sum(n for _, n in written)
        self.unsettled = []
        stats.commits += 1
        return True
