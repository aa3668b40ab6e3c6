"""The run loop's delivery rules, on the in-process at-least-once source (``wirepipe.testing.RedeliveringSource``).

Each test runs in milliseconds what the chaos tests prove with real processes: a record is acknowledged only
once the sink has made it durable, a sink failure holds records (kept in progress, never redelivered), dead
letters are settled only once the dead letter is durable, and a crash redelivers exactly what was not
committed. ``Ledger`` keeps apart what a sink was given and what it flushed, as a file or a stream does: a
crash loses the first.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from wirepipe.core.batch import Batch, Rejected
from wirepipe.core.errors import BackOff
from wirepipe.operators.map import Map
from wirepipe.testing import Crashed, RedeliveringSource, TestingSink, run


class Ledger(TestingSink):
    """A sink whose ``durable`` positions (the ``seq`` of each record) are those written before a flush; its
    ``close`` does not flush, so a crash loses what was only written (the loop flushes before it acknowledges).
    ``fail_writes`` writes and ``fail_flushes`` flushes fail first with ``BackOff(0.01)``."""

    def __init__(self, *, fail_writes: int = 0, fail_flushes: int = 0) -> None:
        super().__init__()
        self.durable: list[int] = []
        self._written: list[int] = []
        self.fail_writes = fail_writes
        self.fail_flushes = fail_flushes

    async def write(self, batch: Batch) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise BackOff("sink down", 0.01)
        await super().write(batch)
        self._written += batch.meta["seq"]

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        await super().write_rejected(rejected)
        self._written += [r.meta["seq"] for r in rejected]

    async def flush(self) -> None:
        if self.fail_flushes:
            self.fail_flushes -= 1
            raise BackOff("sink down", 0.01)
        await super().flush()
        self.durable += self._written
        self._written = []

    async def close(self) -> None:
        pass


class Checked(RedeliveringSource):
    """Fails the run when it is asked to acknowledge a record the sink has not made durable, or to settle a
    dead letter the dead letter has not."""

    def __init__(self, records: Any, sink: Ledger, dead_letter: Ledger | None = None, **options: Any) -> None:
        super().__init__(records, **options)
        self.sink, self.dead_letter = sink, dead_letter or sink

    async def ack(self, batch: Batch) -> None:
        early = set(batch.meta["ack"]) - set(self.sink.durable)
        assert not early, f"acknowledged before the sink's flush: {sorted(early)}"
        await super().ack(batch)

    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        early = {r.meta["ack"] for r in rejected} - set(self.dead_letter.durable)
        assert not early, f"settled before the dead letter's flush: {sorted(early)}"
        await super().settle_rejected(rejected)


def test_records_are_acknowledged_only_after_the_sink_flushed_them() -> None:
    sink = Ledger()
    source = Checked(range(500), sink, batch_size=20, ack_pressure=60)
    stats = run(source, [Map(lambda v: v * 2)], sink)
    assert sink.records == [v * 2 for v in range(500)]
    assert source.acked == list(range(500)) and stats.acked == 500
    assert stats.commits >= 500 // 60  # commits came with the ack pressure, not only at the end
    assert source.redelivered == 0 and source.terminated == []


def test_a_failing_sink_holds_its_records_in_progress_and_none_is_redelivered() -> None:
    # 40 failed writes and 10 failed flushes at 10 ms each hold the records well past ack_wait (0.2 s): only the
    # loop's in-progress acks (the held batch, what is queued, what is written and not flushed) keep them
    sink = Ledger(fail_writes=40, fail_flushes=10)
    source = Checked(range(300), sink, batch_size=10, ack_wait=0.2, ack_pressure=50)
    stats = run(source, [], sink)
    assert source.redelivered == 0 and source.deliveries == [1] * 300
    assert source.in_progress_calls >= 50 and stats.sink_errors == 50
    assert sink.records == list(range(300)) and source.acked == list(range(300))
    assert stats.rejected == 0 and sink.rejects == []  # a sink failure is never the records'


def test_dead_letters_are_settled_after_the_dead_letter_flushed_them() -> None:
    sink, dead = Ledger(), Ledger()
    source = Checked(range(100), sink, dead, batch_size=10, ack_pressure=30)
    stats = run(source, [Map(lambda v: 100 // (v % 7))], sink, dead_letter=dead)
    bad = [v for v in range(100) if v % 7 == 0]
    assert source.terminated == bad and [r.value for r in dead.rejects] == bad
    assert source.acked == [v for v in range(100) if v % 7] and stats.rejected == len(bad) == 15
    assert source.redelivered == 0


def test_a_crash_before_commit_redelivers_exactly_the_uncommitted_records() -> None:
    records = list(range(300))
    sink = Ledger()
    source = Checked([*records[:170], RedeliveringSource.CRASH, *records[170:]], sink, batch_size=10,
                     ack_pressure=40)
    with pytest.raises(Crashed):
        run(source, [], sink)
    delivered = {p for p, n in enumerate(source.deliveries) if n}
    acked = set(source.acked)
    uncommitted = delivered - acked
    assert delivered == set(range(170)) and acked and uncommitted  # committed some, not all it read
    assert acked <= set(sink.durable)  # nothing acknowledged is lost with the crash

    run(source, [], sink)  # the restarted worker
    again = {p for p, n in enumerate(source.deliveries) if n == 2}
    assert again == uncommitted and max(source.deliveries) == 2
    assert sorted(source.acked) == records and len(source.acked) == 300  # each acknowledged once
    durable = Counter(sink.durable)
    assert set(durable) == set(records)  # nothing lost
    assert {p for p, n in durable.items() if n > 1} <= uncommitted  # duplicates only of what was not committed


def test_a_stopped_worker_commits_what_it_wrote_and_the_next_one_goes_on() -> None:
    sink = Ledger()
    source = Checked([*range(50), RedeliveringSource.STOP, *range(50, 80)], sink, batch_size=8)
    first = run(source, [], sink)
    assert source.acked == sink.durable == list(range(50)) and first.acked == 50
    second = run(source, [], sink)
    assert source.acked == sink.durable == list(range(80)) and second.records_in == 30
    assert source.redelivered == 0


def test_a_record_neither_acknowledged_nor_settled_comes_back_after_ack_wait() -> None:
    import asyncio

    source = RedeliveringSource(["a", "b", "c"], batch_size=3, ack_wait=0.05)

    async def read() -> list[list[tuple[Any, int]]]:
        await source.open()
        got: list[list[tuple[Any, int]]] = []
        async for batch in source.batches():
            got.append(list(zip(batch.values, batch.meta["delivered"], strict=True)))
            if len(got) == 1:  # "a" acknowledged, "c" dead-lettered, "b" left as it is
                await source.ack(Batch(["a"], meta={"ack": [0]}))
                await source.settle_rejected([Rejected("map", "f", "bad", "c", meta={"ack": 2})])
            else:
                await source.ack(batch)
        return got

    assert asyncio.run(read()) == [[("a", 1), ("b", 1), ("c", 1)], [("b", 2)]]
    assert source.acked == [0, 1] and source.terminated == [2] and source.redelivered == 1


def keep_even(value: int) -> bool:
    return value % 2 == 0


@pytest.mark.timeout(30)  # unacknowledged, they would be delivered again and again: the run would not end
@pytest.mark.parametrize("operators", ["filter", "pack"])
def test_records_the_operators_drop_or_join_are_acknowledged_with_their_batch(operators: str) -> None:
    """A filter drops records and ``pack`` joins five into one (the message keeps the first one's meta): the
    others' ack handles are acknowledged at the commit of the batch they came in, never left to be delivered
    again after ``ack_wait``."""
    from wirepipe.operators.filter import Filter
    from wirepipe.operators.pack import Pack

    sink = TestingSink()
    source = RedeliveringSource(range(300), batch_size=20, ack_wait=0.05, ack_pressure=60)
    stats = run(source, [Filter(keep_even)] if operators == "filter" else [Pack(5)], sink)
    assert sorted(source.acked) == list(range(300)) and source.redelivered == 0
    # records out are records; the messages pack made are counted apart
    assert (stats.records_out, stats.messages_out) == ((150, 150) if operators == "filter" else (300, 60))
