"""The garbage collector's settings while pipelines run (core/collector.py): set by the first run, restored by
the last, so overlapping runs in one process leave the process as they found it."""

from __future__ import annotations

import asyncio
import gc

from wirepipe.core import collector
from wirepipe.core.collector import BATCHES_APART, YOUNG_CAP, YOUNG_THRESHOLD


def test_overlapping_runs_space_young_collections_and_the_last_to_end_restores_them() -> None:
    before = gc.get_threshold()
    assert before[0] < YOUNG_THRESHOLD  # CPython's default (700): else this test shows nothing
    collector.run_started()
    collector.run_started()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:]) and gc.get_freeze_count() > 0
    collector.run_ended()
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # one run still going
    collector.run_ended()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_young_threshold_follows_the_largest_batch_while_runs_go_on() -> None:
    before = gc.get_threshold()
    collector.batch_written(50_000)  # no run: nothing changes
    assert gc.get_threshold() == before
    collector.run_started()
    collector.batch_written(100)  # smaller than the start's threshold: kept
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    collector.batch_written(10_000)
    assert gc.get_threshold() == (10_000 * BATCHES_APART, *before[1:])
    collector.batch_written(5_000)  # a smaller batch later: never lowered while the run goes on
    assert gc.get_threshold()[0] == 10_000 * BATCHES_APART
    collector.batch_written(10 * YOUNG_CAP)
    assert gc.get_threshold()[0] == YOUNG_CAP
    collector.run_ended()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_pipeline_run_sets_them_while_it_runs_and_not_after() -> None:
    from wirepipe.connectors.generate import GenerateSource
    from wirepipe.operators.map import Map
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSink

    before = gc.get_threshold()
    seen: list[int] = []

    def look(record: dict) -> dict:
        seen.append(gc.get_threshold()[0])
        return record

    sink = TestingSink()
    asyncio.run(Pipeline(GenerateSource("point", count=10), [Map(look)], sink).run_async())
    assert len(sink.records) == 10 and set(seen) == {YOUNG_THRESHOLD}
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
