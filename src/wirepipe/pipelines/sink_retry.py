"""A sink that fails is the sink's condition, never the records': hold them, back off, retry.

A failed write or flush (``connectors/connector.py``: ``NotConnected``, ``BackOff``, an I/O or connection
error, a timeout) says nothing about the records. ``SinkRetry`` holds every record the run loop
has (the batch being written, what was written and not committed, what waits in the queue),
keeps a redelivering source from sending them again (``AtLeastOnce.in_progress``; nothing is
``nak``-ed, so a sink outage never counts toward ``max_deliver``), waits (what a ``BackOff``
asks for, else the bounded exponential backoff of ``core/backoff.py``'s ``Outage``) and retries the same
write or flush for as long as it takes. The failure is logged at once and then every 30 s, and
``error`` names it for the status line while it lasts.

Only a record the sink refuses for its own sake (a value it cannot represent: ``TypeError``,
``ValueError``, a ``StageError``) is rejected: ``write`` halves the batch until the refused
records stand alone, writes the rest, and hands those to the run loop's dead letter. An
operator's ``prepare`` that waits on I/O (a dictionary fetched from NATS) is held and retried
the same way (``down``/``up``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..connectors.connector import AtLeastOnce, Sink, Source
from ..core.backoff import ExponentialBackoff, Outage
from ..core.batch import Batch, Rejected, describe_error
from ..core.errors import ConfigError, SinkUnavailable, is_sink_failure
from ..core.redact import redact_secrets
from ..operators.operator import Operator

if TYPE_CHECKING:
    from .stats import RunStats

log = logging.getLogger("wirepipe")
_POSITION = "wirepipe.position"  # meta column: record positions while a batch is written in parts
_LOG_EVERY = 30.0  # seconds between two log lines about the same outage
_FIRST_WAIT = 0.1  # seconds before the first retry
_MAX_WAIT = 5.0  # seconds between retries at most


class SinkRetry:
    """Holds, backs off and retries for one run (see the module doc). ``held()`` gives what the run loop holds
    besides the batch being written: the batches to keep alive upstream and the records they hold."""

    def __init__(self, source: Source, held: Callable[[], tuple[list[Batch], int]]) -> None:
        self.source = source
        self._held = held
        # In-progress acks must reach an at-least-once source within its ack_wait: retry (and send them) at
        # least three times as often.
        keep_alive = source.ack_wait if isinstance(source, AtLeastOnce) else None
        cap = _MAX_WAIT if not keep_alive else max(0.05, min(_MAX_WAIT, keep_alive / 3))
        self.outage = Outage(ExponentialBackoff(first=_FIRST_WAIT, cap=cap), report_every=_LOG_EVERY)

    @property
    def backoff(self) -> ExponentialBackoff:
        return self.outage.backoff

    @property
    def error(self) -> str | None:
        """``<sink>: <error>`` while a part fails (the status line: ``sink unavailable: ...``), else None."""
        return self.outage.error

    async def write(self, sink: Sink, batch: Batch, stats: RunStats) -> None:
        """Write a batch; a sink failure is retried, records the sink cannot represent go to ``batch.rejected``."""
        failed = await self._try_write(sink, batch, stats)
        if failed is None:
            return
        good: list[int] = []
        rejected: list[tuple[int, Rejected]] = []
        batch.meta[_POSITION] = range(len(batch.values))  # where a record the sink refused came from

        async def split(lo: int, hi: int, exc: BaseException) -> None:
            if hi - lo == 1:
                rejected.append((lo, batch.reject(lo, sink.stage, sink.type, describe_error(exc))))
                return
            mid = (lo + hi) // 2
            for a, b in ((lo, mid), (mid, hi)):
                part = batch.slice(a, b)
                why = await self._try_write(sink, part, stats)
                if why is None:
                    refused = {r.meta[_POSITION]: r for r in part.rejected}
                    good.extend(i for i in range(a, b) if i not in refused)
                    rejected.extend(refused.items())
                else:
                    await split(a, b, why)

        await split(0, len(batch.values), failed)
        batch.keep(good)
        del batch.meta[_POSITION]
        for _, r in rejected:
            r.meta.pop(_POSITION, None)
        batch.rejected += [r for _, r in sorted(rejected, key=lambda pr: pr[0])]

    async def _try_write(self, sink: Sink, batch: Batch, stats: RunStats) -> BaseException | None:
        """``sink.write`` until it works or fails for a record's sake (returned); sink failures are retried."""
        while True:
            try:
                await sink.write(batch)
            except (ConfigError, asyncio.CancelledError):
                raise
            except SinkUnavailable as exc:  # NotConnected, BackOff: the sink's signal, never the records'
                await self.down(sink, exc, stats, [batch])
                continue
            except Exception as exc:
                if is_sink_failure(exc):
                    await self.down(sink, exc, stats, [batch])
                    continue
                return exc
            self.up(sink)
            return None

    async def retry(self, part: Sink, action: Callable[[], Awaitable[Any]], stats: RunStats) -> None:
        """Run ``action`` (a flush, a dead letter's write) until it works; every failure is the part's, never a
        record's."""
        while True:
            try:
                await action()
            except (ConfigError, asyncio.CancelledError):
                raise
            except Exception as exc:
                await self.down(part, exc, stats, [])
                continue
            self.up(part)
            return

    async def down(self, part: Sink | Operator, exc: BaseException, stats: RunStats, holding: list[Batch]) -> None:
        """A failure of ``part``: report it (rate-limited), keep the held records alive upstream, back off."""
        stats.sink_errors += 1
        error = describe_error(exc)
        name = part_name(part)
        outage = self.outage
        wait, report = outage.failed(redact_secrets(f"{name}: {error}"), exc)  # the status line prints it as it is
        held, held_records = self._held()
        if report:
            log.error("sink unavailable: %s: %s (for %.0fs, %d failures; holding %d records unacknowledged, "
                      "retrying)", name, error, outage.lasted, outage.failures,
                      sum(len(b.values) for b in holding) + held_records)
        source = self.source
        if isinstance(source, AtLeastOnce):
            await source.in_progress([*holding, *held])
        await asyncio.sleep(wait)

    def up(self, part: Sink | Operator) -> None:
        """``part`` worked: log the recovery once and start the backoff again from its first wait."""
        failures = self.outage.failures
        lasted = self.outage.recovered()
        if lasted is not None:
            log.warning("sink %s works again after %.1fs and %d failure(s): resuming", part_name(part), lasted,
                        failures)


def part_name(part: Sink | Operator) -> str:
    """A sink's name, or an operator's stage and name (an operator whose fetch waits: ``decompress (auto)``)."""
    return part.name if isinstance(part, Sink) else f"{part.stage} ({part.name})"
