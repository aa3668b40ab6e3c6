"""The garbage collector while pipelines run: what existed at start frozen, young collections a batch apart.

A batch keeps thousands of young objects alive across collections (its records, and the lists that hold
them), and CPython's collector (3.11) looks at the young generation every 700 container allocations: a
batch of 10,000 decoded records meets ~14 young collections, each of which walks the whole list being
filled, and as many of their survivors are promoted and walked again by the older generations. Two
changes for the life of a run:

- ``gc.freeze()`` takes what exists at start (modules, config, connections) out of every later walk
  (core NATS consume, wall clock: 0.92 of a hand-written loop with it, 0.82 without);
- the young generation's threshold goes to ``YOUNG_THRESHOLD`` allocations at the start, and then to
  ``BATCHES_APART`` times the records of the largest batch the run has written (``batch_written``; at most
  ``YOUNG_CAP``): a framed ``point`` consumer (bincode, 100 records a message) spent 0.38 µs of CPU a record
  against 0.57 at 700 (medians of 4 alternating runs; 0.32 with the collector off). Only cyclic garbage
  waits longer; everything else is still freed by reference counting at once.

Why the threshold follows the batch: CPython counts the young generation as container allocations *net of
deallocations*. A steady run frees the last batch's records as it decodes the next, so with a threshold of
about one batch the count still reaches it once a batch, with the whole batch alive (a 10,000-record batch:
one young collection of ~0.3 ms each, ~0.03-0.09 µs a record, and two full collections a 4M-record run);
a threshold a few batches wide is reached only by what outlives its batch (or a cycle), so a steady run
collects only now and then (8 young collections in 4M records, against 365).

Both are process-wide, like the allocator's policy (``allocator.py``); runs may overlap in one process
(several pipelines on one event loop, or on loops in several threads), so the first to start sets them
and the last to end restores them.
"""

from __future__ import annotations

import gc
import threading

YOUNG_THRESHOLD = 10_000
BATCHES_APART = 4  # the young threshold in records of the largest batch (a record is about a container)
YOUNG_CAP = 1_000_000

_lock = threading.Lock()
_runs = 0
_saved: tuple[int, int, int] | None = None
_young = 0  # the young threshold the runs set (0: none running)


def run_started() -> None:
    """Freeze what exists and space the young collections (see the module doc)."""
    global _runs, _saved, _young
    with _lock:
        gc.freeze()
        if _runs == 0:
            _saved = gc.get_threshold()
            young, *older = _saved
            _young = max(young, YOUNG_THRESHOLD)
            gc.set_threshold(_young, *older)
        _runs += 1


def batch_written(records: int) -> None:
    """A run wrote a batch of ``records``: the young threshold kept ``BATCHES_APART`` such batches wide (see the
    module doc); one comparison unless the batch is the largest yet."""
    global _young
    wanted = min(records * BATCHES_APART, YOUNG_CAP)
    if wanted <= _young:
        return
    with _lock:
        if _runs and wanted > _young:
            _young = wanted
            gc.set_threshold(wanted, *gc.get_threshold()[1:])


def run_ended() -> None:
    """Undo ``run_started`` once the last run in the process ended: what became garbage since can be
    collected again."""
    global _runs, _saved, _young
    with _lock:
        _runs = max(0, _runs - 1)
        if _runs == 0:
            _young = 0
            if _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None
            gc.unfreeze()
