"""How a pool of workers (``run --workers N``, ``pool.py``) restarts a worker that died: the pipeline's ``restart:``
section. A restart waits through one bounded exponential backoff (``core/backoff.py``); a worker that keeps dying
soon after its start makes the pool give up rather than restart it for ever."""

from __future__ import annotations

from pydantic import Field

from ..core.backoff import ExponentialBackoff
from ..core.models import Duration, Strict


class RestartPolicy(Strict):
    """``restart: {backoff: 500ms, max_backoff: 30s, max_failures: 5, stable_after: 60s}``: how a pool of workers
    (``run --workers N``) restarts a worker that died: after ``backoff``, doubling up to ``max_backoff``; it
    gives up after ``max_failures`` quick deaths in a row."""

    backoff: Duration = Field(default=0.5, gt=0, description="the wait before the first restart of a worker")
    max_backoff: Duration = Field(default=30.0, gt=0, description="the longest wait between two restarts")
    max_failures: int = Field(default=5, ge=1, description="deaths in a row, each within `stable_after` of its "
                                                           "start, that make the pool give up (exit 1)")
    stable_after: Duration = Field(default=60.0, gt=0, description="a worker that lived this long starts a fresh "
                                                                   "count of failures")

    def delays(self) -> ExponentialBackoff:
        """The waits between one worker's restarts (and its count of failures)."""
        return ExponentialBackoff(self.backoff, self.max_backoff)
