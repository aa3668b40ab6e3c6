"""How long a part waits before it tries again: bounded exponential backoff.

Every retry wirepipe makes waits through ``ExponentialBackoff``: a sink that fails (the run loop),
a NATS reconnect, a pool worker's restart, a pull request that failed, a JetStream API request
while the cluster has no leader. The first wait is short, so a blip costs little; each failure
doubles it up to ``cap``, so an outage of any length is retried at least every ``cap`` seconds
without hammering what is down. A part that knows better raises ``BackOff(wait)``
(``core/errors.py``: the server said when, e.g. a full stream): that wait is taken instead, still
within the cap. ``reset()`` after a success starts again from the first wait. ``jitter`` (a
fraction of the wait, either way) spreads clients that lost the same server.

``Outage`` is a part that fails until it works again, retried for as long as it takes (a sink, the
metrics writer on a full disk): its backoff, since when it fails and when to say so, at the first
failure, then every ``report_every`` seconds, and once when it works again, so a long outage is
neither silent nor a log line per try.

>>> retry = ExponentialBackoff(first=0.1, cap=1.0)
>>> [retry.next() for _ in range(6)]
[0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
>>> from wirepipe.core.errors import BackOff
>>> retry.next(BackOff("stream full", wait=0.5)), retry.next(BackOff("rate limit", wait=60)), retry.failures
(0.5, 1.0, 8)
>>> retry.reset(); retry.next()
0.1
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field

from .errors import BackOff


@dataclass
class ExponentialBackoff:
    """``first * 2**failures`` seconds, at most ``cap``, give or take ``jitter`` of it; ``failures`` counts the
    failures since the last ``reset``."""

    first: float
    cap: float
    jitter: float = 0.0
    failures: int = 0

    def delay(self, attempt: int) -> float:
        """The wait after ``attempt`` earlier failures (0: the first wait), whoever counts them (nats-py counts a
        server's reconnect attempts itself)."""
        wait = min(self.cap, self.first * 2.0 ** min(max(attempt, 0), 64))
        if self.jitter:
            wait *= 1 + random.uniform(-self.jitter, self.jitter)
        return wait

    def next(self, exc: BaseException | None = None) -> float:
        """Count one more failure and return the wait before the next try: what a ``BackOff`` asks for (within
        the cap), else the exponential wait."""
        attempt = self.failures
        self.failures += 1
        if isinstance(exc, BackOff):
            return min(self.cap, max(0.0, exc.wait))
        return self.delay(attempt)

    def reset(self) -> None:
        """A success: the next failure waits ``first`` again."""
        self.failures = 0

    async def sleep(self, exc: BaseException | None = None, stop: asyncio.Event | None = None) -> bool:
        """Wait ``next(exc)`` seconds, or less if ``stop`` is set meanwhile; True when it was."""
        wait = self.next(exc)
        if stop is None:
            await asyncio.sleep(wait)
            return False
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
        return stop.is_set()


@dataclass
class Outage:
    """A part's failure while it lasts (see the module doc). ``error`` is what failed, None while it works."""

    backoff: ExponentialBackoff
    report_every: float = 30.0
    error: str | None = None
    since: float = 0.0  # monotonic seconds of the first failure of this outage
    _reported: float = field(default=0.0, repr=False)

    def failed(self, error: str, exc: BaseException | None = None) -> tuple[float, bool]:
        """One more failure: the wait before the next try, and whether to report it now (the first failure
        of an outage, then every ``report_every`` seconds)."""
        now = time.monotonic()
        if self.error is None:
            self.since = now
        report = self.error is None or now - self._reported >= self.report_every
        if report:
            self._reported = now
        self.error = error
        return self.backoff.next(exc), report

    def recovered(self) -> float | None:
        """It works: the seconds the outage lasted, None when there was none; the next failure waits the first
        wait again."""
        if self.error is None:
            return None
        self.error = None
        self.backoff.reset()
        return time.monotonic() - self.since

    @property
    def lasted(self) -> float:
        """Seconds since the outage began (0 while the part works)."""
        return time.monotonic() - self.since if self.error is not None else 0.0

    @property
    def failures(self) -> int:
        """Failures since the outage began."""
        return self.backoff.failures
