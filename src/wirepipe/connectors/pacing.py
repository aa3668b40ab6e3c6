"""Replaying at the recorded pace: when each record is due, measured on a clock that can be swapped.

A record's *virtual time* is the sum of the recorded gaps before it (timestamps in
capture order; a gap that runs backwards counts as 0, one longer than ``max_gap`` as
``max_gap``). At ``speed`` s it is due ``virtual / s`` seconds after the replay's
origin. The pacer groups consecutive records that fall due within one ``tick`` into one
release, so pacing costs one wait per tick, not one per record.

The clock is a parameter: ``MonotonicClock`` for a real replay, ``WallClock`` when
processes share an origin, ``LogicalClock`` (jumps instead of sleeping) for tests and
dry runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on this clock."""

    async def sleep_until(self, when: float, stop: asyncio.Event) -> bool:
        """Wait until ``now() >= when``; False if ``stop`` was set first."""


class MonotonicClock:
    """Real time, from ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, when: float, stop: asyncio.Event) -> bool:
        delay = when - self.now()
        if delay > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        return not stop.is_set()


class WallClock(MonotonicClock):
    """Real time since the Unix epoch, so processes can share one origin."""

    def now(self) -> float:
        return time.time()


class LogicalClock:
    """A clock that jumps to the time it is asked to wait for; ``waits`` counts the waits."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start
        self.waits = 0

    def now(self) -> float:
        return self.time

    async def sleep_until(self, when: float, stop: asyncio.Event) -> bool:
        self.waits += 1
        self.time = max(self.time, when)
        await asyncio.sleep(0)
        return not stop.is_set()


class Pacer:
    """Releases runs of records at their recorded inter-arrival times divided by ``speed``.

    ``origin`` is the clock time at which virtual time 0 is due (the first ``wait`` sets it
    when it is not given); ``last_ns``/``virtual_ns`` resume the schedule after records
    another process replays (``advance`` computes them).
    """

    def __init__(self, speed: float = 1.0, *, max_gap: float | None = None, clock: Clock | None = None,
                 tick: float = 0.002, origin: float | None = None, last_ns: int | None = None,
                 virtual_ns: int = 0) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self.max_gap_ns = None if max_gap is None else int(max_gap * 1e9)
        self.clock: Clock = clock or MonotonicClock()
        self.tick = tick
        self.origin = origin
        self.last_ns = last_ns
        self.virtual_ns = virtual_ns

    def _virtual(self, timestamps: Any) -> Any:
        """Virtual times (ns) of a column of timestamps, continuing the schedule so far."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        col = timestamps.combine_chunks() if isinstance(timestamps, pa.ChunkedArray) else pa.array(timestamps)
        n = len(col)
        if col.null_count:
            col = pc.fill_null_forward(col)
            if col.null_count:  # leading nulls: they happen when the previous record did
                col = pc.fill_null(col, self.last_ns) if self.last_ns is not None else pc.fill_null_backward(col)
            if col.null_count:  # nothing to go by at all: all at once
                col = pc.fill_null(col, 0)
        ts = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        first = ts[0] if self.last_ns is None else self.last_ns
        gaps = np.diff(ts, prepend=first)
        np.clip(gaps, 0, self.max_gap_ns, out=gaps)
        virtual = self.virtual_ns + np.cumsum(gaps)
        if n:
            self.last_ns = int(ts[-1])
            self.virtual_ns = int(virtual[-1])
        return virtual

    def advance(self, timestamps: Any) -> None:
        """Move the schedule past records without releasing them."""
        self._virtual(timestamps)

    def schedule(self, timestamps: Any) -> list[tuple[int, int, float]]:
        """Runs ``(start, stop, due)`` of the records, ``due`` in seconds after the origin."""
        import numpy as np

        due = self._virtual(timestamps) / (self.speed * 1e9)
        runs = []
        start, n = 0, len(due)
        while start < n:
            stop = max(start + 1, int(np.searchsorted(due, due[start] + self.tick, side="left")))
            runs.append((start, stop, float(due[start])))
            start = stop
        return runs

    async def wait(self, due: float, stop: asyncio.Event) -> bool:
        """Wait until a run is due; False if ``stop`` was set first."""
        if self.origin is None:
            self.origin = self.clock.now() - due
        return await self.clock.sleep_until(self.origin + due, stop)
