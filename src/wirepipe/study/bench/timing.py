"""Timing operators over batches: the one harness behind ``wirepipe bench``, the reference tables,
``wirepipe plan``'s in-process costs and ``benchmarks/bench_formats.py``.

A measurement is K iterations, after a warm-up, of N repetitions of a sample of records
(``repetitions``) cut into batches (``chunks``, ``batch_size_for``). Each stage runs the way a
pipeline runs its operators, one batch at a time through ``Pipeline.process_batch`` with the
allocator's ``between_batches`` before each, timed with a monotonic clock (``time_batches``);
``best_of`` keeps the fastest of a few rounds where one figure is wanted.

The garbage collector is handled as the run loop handles it (``Pipeline.run_async``), so that a
stage costs here what it costs in a run (``as_in_a_run``):

- what exists when a timed stage starts (the process's modules, the N repetitions of input,
  500,000 records for ``point``, an earlier stage's outputs) is frozen out of the collector's
  walks. Otherwise a full collection in the middle of a stage walks all of it and is charged to
  that stage, while a pipeline never holds more than a few batches;
- the collector stays on: the young collections a stage's own allocations trigger are part of
  what the stage costs in a run; pausing the collector would leave them out of the figures;
- a stage's outputs that no later stage reads are let go batch by batch, as a run lets a batch
  go once its sink wrote it (freeing them is counted with the stage, as a consumer pays it per
  record too): decoded records kept for a whole iteration would be walked by the collections
  that follow and would fault in fresh memory where a pipeline reuses the last batch's.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...core.allocator import between_batches
from ...core.batch import Batch
from ...operators.operator import Operator
from ...pipelines.pipeline import Pipeline
from ...testing import TestingSource

_ns = time.monotonic_ns
_frozen_depth = 0


def repetitions(sample: Sequence[Any], n: int) -> list[Any]:
    """``n`` records cycling ``sample`` (its variety in every iteration, the same records every time).

    >>> repetitions([1, 2, 3], 7)
    [1, 2, 3, 1, 2, 3, 1]
    """
    k = len(sample)
    return (list(sample) * (n // k + 1))[:n]


def chunks(values: Sequence[Any], size: int) -> list[list[Any]]:
    """``values`` in batches of ``size`` (the last one shorter).

    >>> chunks([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    """
    return [list(values[i:i + size]) for i in range(0, len(values), size)]


def batch_size_for(raw_bytes: float) -> int:
    """Batches of about 1 MB of raw data, 1..1000 records, as a pipeline would carry them."""
    return max(1, min(1000, int(1_000_000 / max(raw_bytes, 1.0))))


@contextmanager
def as_in_a_run() -> Iterator[None]:
    """The collector as a run has it: what exists now frozen out of its walks, the collector on (see the module
    doc). Nested uses freeze again (what the inner one found is frozen too); the outermost one unfreezes."""
    global _frozen_depth
    gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if not _frozen_depth:
            gc.unfreeze()  # what became garbage since can be collected again


@dataclass
class Timed:
    """One stage over every batch: its outputs (per batch; empty when not kept), clock readings and the first
    rejection reason of each batch that rejected a record."""

    outputs: list[list[Any]]
    start_ns: int
    end_ns: int
    errors: list[str] = field(default_factory=list)

    @property
    def ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def ms(self) -> float:
        return self.ns / 1e6


def time_batches(operators: Operator | Sequence[Operator], batches: Sequence[list[Any]], *, schema: Any = None,
                 keep: bool = True, name: str = "timing") -> Timed:
    """Run ``operators`` over every batch as a pipeline runs them, the collector as in a run; time the whole.

    ``keep=False`` lets each batch's output go before the next batch runs (a stage whose outputs no later
    stage reads: see the module doc).
    """
    ops = [operators] if isinstance(operators, Operator) else list(operators)
    process = Pipeline(TestingSource(()), ops, name=name).process_batch
    outputs: list[list[Any]] = []
    errors: list[str] = []
    with as_in_a_run():
        start = _ns()
        for chunk in batches:
            between_batches()
            b = process(Batch(chunk, schema=schema))
            if b.rejected:
                errors.append(b.rejected[0].error)
            if keep:
                outputs.append(b.values)
        end = _ns()
    return Timed(outputs, start, end, errors)


def best_of(rounds: int, measure: Callable[[], Timed]) -> Timed:
    """The fastest of ``rounds`` runs of ``measure`` (at least one): where one figure is wanted, the least
    disturbed run is the closest to the stage's own cost."""
    runs = [measure() for _ in range(max(rounds, 1))]
    return min(runs, key=lambda t: t.ns)
