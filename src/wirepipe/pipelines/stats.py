"""What a run did (``RunStats``): what ``Pipeline.run()`` returns, what the status line, the run summary and the
exit code read (``core/exit_codes.py``: ``RunStats.outcome``).

The run loop (``run.py``) counts as it goes; what the source and the sink know (losses, redeliveries, records
awaiting acknowledgement, the input it went past) is read from them when the run ends, and a cut drain adds what
it left (``worker.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..connectors.connector import CountsLoss, Unreadable
from ..core.rejections import Rejections

if TYPE_CHECKING:
    from ..core.exit_codes import Outcome


@dataclass
class RunStats:
    """What a run did: counts in and out, rejects by stage and by reason, wall time."""

    batches: int = 0
    records_in: int = 0  # read and taken through (a cut run hands what it could not finish back to its source)
    records_out: int = 0
    messages_out: int = 0  # values written: messages on the wire, several records each after ``pack``
    rejected: int = 0
    bytes_out: int = 0
    acked: int = 0  # records written and acknowledged to the source (a durable)
    acked_messages: int = 0  # the messages (values) they were written in: fewer after ``pack``
    sink_errors: int = 0  # failed sink writes or flushes (each retried)
    commits: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed: float = 0.0
    opened: float | None = None  # seconds from the start until every part was open (a wait for a stream included)
    rejected_by_stage: dict[str, int] = field(default_factory=dict)
    rejections: Rejections = field(default_factory=Rejections)  # by stage, operator and reason
    projected: int = 0  # records whose undeclared fields serialize dropped (extra_fields: drop)
    # What the source knows it lost (core NATS: gaps, client drops, discarded at stop), None if it cannot lose.
    losses: dict[str, int] | None = None
    redelivered: int = 0  # records read that had been delivered before (``AtLeastOnce.redelivered``)
    # Records still awaiting acknowledgement or redelivery when a bounded run ended (``AtLeastOnce.outstanding``; a cut
    # drain's unacknowledged records too): exit 6.
    outstanding: int = 0
    deduplicated: int = 0  # records the sink's destination already had (``ConfirmsWrites.deduplicated``)
    unreadable: list[Unreadable] = field(default_factory=list)  # input the source went past (``ReadsFiles.unreadable``)
    interrupted: bool = False  # a bounded run stopped by SIGINT before its end, after a clean drain (worker.py)
    cut: str | None = None  # the drain was cut (shutdown_timeout, a second signal): what it left (worker.py)
    unconfirmed: int = 0  # records published and not confirmed by the server when the drain was cut
    sink_error: str | None = None  # the sink still failed when the drain was cut (what it held is not settled)
    # What writing the metrics met (``MetricsRecorder.figures``: rows a full disk delayed, failed writes, values
    # clamped or nulled), None without metrics.
    metrics: dict[str, int] | None = None

    @property
    def lost(self) -> int:
        return self.losses["lost"] if self.losses else 0

    def outcome(self) -> Outcome:
        """What the run's exit code follows (``exit_codes.verdict``)."""
        from ..connectors.connector import describe_unreadable
        from ..core.exit_codes import Outcome

        failures = [describe_unreadable(self.unreadable)] if self.unreadable else []
        if self.unconfirmed:
            failures.append(f"{self.unconfirmed:,} record(s) published and not confirmed by the server when the "
                            "drain was cut: whether they were stored is unknown")
        if self.sink_error:
            failures.append(f"the sink still failed when the drain was cut ({self.sink_error}): what it held was "
                            "not written (a stream's records are delivered again: not acknowledged)")
        unwritten = (self.metrics or {}).get("metrics_rows_unwritten", 0)
        if unwritten:
            failures.append(f"{unwritten:,} metrics row(s) not written: the disk still refused them when the run "
                            "was stopped")
        losses = self.losses or {}
        return Outcome(records=self.records_in, rejected=self.rejected, lost=self.lost,
                       unsure=losses.get("unsure", 0), forgotten=losses.get("forgotten_running", 0),
                       outstanding=self.outstanding,
                       interrupted=self.interrupted, drained=self.cut is None, failures=failures)

    def working(self) -> float:
        """Seconds of work so far: since every part was open (0 while opening or waiting for a stream)."""
        if self.opened is None:
            return 0.0
        end = self.started + self.elapsed if self.elapsed else time.monotonic()
        return max(0.0, end - self.started - self.opened)

    @property
    def records_per_second(self) -> float:
        return self.records_out / self.elapsed if self.elapsed > 0 else 0.0


class LossSince:
    """What a loss-counting source found lost since the last look, and of it what only publishers' stamps claim
    (``losses()["tail"]``, gaps.py): each batch's source row carries the change, so the metrics' ``lost`` and
    ``lost_tail`` columns add up to the run summary's figures."""

    def __init__(self, source: CountsLoss) -> None:
        self.source = source
        self._lost = 0
        self._tail = 0

    def take(self) -> tuple[int, int]:
        """(lost, of it claimed by stamps alone) since the previous take."""
        lost, tail = self.source.lost, self.source.losses().get("tail", 0)
        since = (lost - self._lost, tail - self._tail)
        self._lost, self._tail = lost, tail
        return since
