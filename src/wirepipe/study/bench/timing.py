"""Timing operators over batches: the one harness behind ``wirepipe bench``, the reference tables,
``wirepipe plan``'s in-process costs and ``benchmarks/bench_formats.py``.

A measurement is K iterations, after a warm-up, of N repetitions of a sample of records
(``repetitions``) cut into batches (``chunks``, ``batch_size_for``). Each stage runs the way a
pipeline runs its operators, one batch at a time through ``Pipeline.process_batch`` with the
allocator's ``between_batches`` before each, timed with a monotonic clock (``time_batches``);
``best_of`` keeps the fastest of a few rounds where one figure is wanted. What is not an operator
(a codec's function in ``bench``'s calibration, a Parquet sink's write in ``plan``, a transport
iteration in the calibration's probes) is timed call by call (``time_each``), and a phase's wall
time is read from a ``Stopwatch``: the study reads its clock here only.

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
    """One stage over every batch (or a function over every item): its outputs (per batch; empty when not kept),
    clock readings (``ends_ns``: after each call, where they were timed one by one) and the first rejection reason
    of each batch that rejected a record."""

    outputs: list[list[Any]]
    start_ns: int
    end_ns: int
    errors: list[str] = field(default_factory=list)
    ends_ns: list[int] = field(default_factory=list)

    @property
    def ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def ms(self) -> float:
        return self.ns / 1e6

    @property
    def seconds_each(self) -> list[float]:
        """Seconds of each call, where they were timed one by one (``time_each``)."""
        starts = [self.start_ns, *self.ends_ns[:-1]]
        return [(end - start) / 1e9 for start, end in zip(starts, self.ends_ns, strict=True)]


class Stopwatch:
    """A phase's wall time on the harness's clock: started when made, ``seconds`` since."""

    def __init__(self) -> None:
        self.start_ns = _ns()

    @property
    def seconds(self) -> float:
        return (_ns() - self.start_ns) / 1e9


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


def time_each(fn: Callable[[Any], Any], items: Sequence[Any], *, budget: float | None = None) -> Timed:
    """``fn`` called on each item in turn, the collector as in a run, each call's end read (``ends_ns``). One
    untimed call on the first item comes first: a first call may import a module or fill a cache. With ``budget``
    (seconds) it stops after the call that passes it, so a slow function (``xz:9`` on small records) costs one
    call, not the list. ``outputs`` is one list, the timed calls' outputs.

    >>> timed = time_each(lambda x: x * 2, [1, 2, 3])
    >>> timed.outputs, len(timed.seconds_each)
    ([[2, 4, 6]], 3)
    """
    if items:
        fn(items[0])
    out: list[Any] = []
    ends: list[int] = []
    limit = None if budget is None else int(budget * 1e9)
    with as_in_a_run():
        start = _ns()
        for item in items:
            out.append(fn(item))
            ends.append(_ns())
            if limit is not None and ends[-1] - start >= limit:
                break
    return Timed([out], start, ends[-1] if ends else start, ends_ns=ends)


def best_of(rounds: int, measure: Callable[[], Timed]) -> Timed:
    """The fastest of ``rounds`` runs of ``measure`` (at least one): where one figure is wanted, the least
    disturbed run is the closest to the stage's own cost."""
    runs = [measure() for _ in range(max(rounds, 1))]
    return min(runs, key=lambda t: t.ns)
