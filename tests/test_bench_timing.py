"""``bench.timing``: the one harness that times operators over batches (the study, the reference tables, the
capacity plan, benchmarks/bench_formats.py), with the collector as a run has it."""

from __future__ import annotations

import gc

from wirepipe.core.batch import Batch
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.operator import Operator
from wirepipe.operators.serialize import Serialize
from wirepipe.study.bench.timing import (
    Stopwatch,
    Timed,
    as_in_a_run,
    best_of,
    chunks,
    repetitions,
    time_batches,
    time_each,
)


class Watch(Operator):
    """Passes values through and notes, at each batch, what the collector looks like."""

    stage = "watch"

    def __init__(self) -> None:
        self.name, self.params, self.seen = "watch", {}, []

    def __call__(self, batch: Batch) -> Batch:
        self.seen.append((gc.isenabled(), gc.get_freeze_count()))
        return batch


def test_a_stage_runs_with_what_existed_frozen_and_the_collector_on() -> None:
    held = [{"i": i, "s": [i]} for i in range(20_000)]  # the harness's inputs: N repetitions
    watch = Watch()
    timed = time_batches(watch, chunks(held, 1000))
    assert len(watch.seen) == 20 and all(enabled for enabled, _ in watch.seen)  # the collector stays on
    assert all(frozen >= len(held) for _, frozen in watch.seen)  # the inputs are out of its walks
    assert gc.get_freeze_count() == 0  # and back in once the stage is timed
    assert timed.outputs == chunks(held, 1000) and timed.end_ns > timed.start_ns and timed.ms == timed.ns / 1e6


def test_nested_uses_unfreeze_once_at_the_outermost() -> None:
    watch = Watch()
    with as_in_a_run():
        time_batches(watch, [[1]])
        assert gc.get_freeze_count() > 0  # still frozen: the outer measurement goes on
    assert gc.get_freeze_count() == 0


def test_outputs_no_later_stage_reads_are_let_go_and_rejections_are_reported() -> None:
    ser = time_batches(Serialize("msgpack"), chunks([{"x": 1}, {"x": object()}, {"x": 3}], 2))
    assert len(ser.outputs) == 2 and len(ser.errors) == 1 and "object" in ser.errors[0]
    de = time_batches(Deserialize("msgpack"), ser.outputs, keep=False)
    assert de.outputs == [] and de.errors == []


def test_repetitions_batches_and_best_of() -> None:
    assert repetitions([{"a": 1}, {"a": 2}], 5) == [{"a": 1}, {"a": 2}] * 2 + [{"a": 1}]
    assert [len(c) for c in chunks(list(range(2500)), 1000)] == [1000, 1000, 500]
    runs = iter([5, 3, 9])
    assert best_of(3, lambda: Timed([["round"]], 0, next(runs))).ns == 3
    assert best_of(0, lambda: time_batches(Watch(), [[7]])).outputs == [[7]]  # at least one round


def test_functions_are_timed_call_by_call_with_an_untimed_first_call_and_a_budget() -> None:
    """``time_each``: one untimed call on the first item, then each item timed with the collector as in a run (its
    end read after each call); a budget stops after the call that passes it. tests/test_one_home.py checks that
    no other code of the study reads a clock to time code."""
    calls: list[tuple[int, bool]] = []

    def double(x: int) -> int:
        calls.append((x, gc.get_freeze_count() > 0))
        return 2 * x

    timed = time_each(double, [1, 2, 3])
    assert calls == [(1, False), (1, True), (2, True), (3, True)]
    assert timed.outputs == [[2, 4, 6]] and len(timed.ends_ns) == 3 and timed.ends_ns[-1] == timed.end_ns
    assert timed.ends_ns == sorted(timed.ends_ns) and timed.start_ns <= timed.ends_ns[0]
    assert len(timed.seconds_each) == 3 and all(s >= 0 for s in timed.seconds_each)
    assert time_each(double, [5, 6, 7], budget=0).outputs == [[10]]  # past the budget after the first timed call
    assert time_each(double, []).outputs == [[]]
    assert Stopwatch().seconds >= 0
