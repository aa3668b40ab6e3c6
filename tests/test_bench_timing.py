"""``bench.timing``: the one harness that times operators over batches (the study, the reference tables, the
capacity plan, benchmarks/bench_formats.py), with the collector as a run has it."""

from __future__ import annotations

import gc
import re
from pathlib import Path

from wirepipe.core.batch import Batch
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.operator import Operator
from wirepipe.operators.serialize import Serialize
from wirepipe.study.bench.timing import Timed, as_in_a_run, best_of, chunks, repetitions, time_batches

ROOT = Path(__file__).parent.parent


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


def test_one_home_for_the_collector_policy_and_the_batches() -> None:
    """No other module times stages with the collector paused or frozen, and no other timing code cuts its
    records into batches by hand."""
    src = ROOT / "src" / "wirepipe"
    policy = re.compile(r"gc\.disable\(\)|gc\.freeze\(\)")
    allowed = {src / "study" / "bench" / "timing.py", src / "core" / "collector.py"}  # the harness and the run loop's
    offenders = [p for p in [*src.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
                 if p not in allowed and policy.search(p.read_text())]
    batching = re.compile(r"def _chunks|\[\w+\[i:i \+ \w+\] for i in range")
    timing_code = [*(src / "study" / "bench").glob("*.py"), *(src / "study" / "plan").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    offenders += [p for p in timing_code if p not in allowed and batching.search(p.read_text())]
    assert not offenders
