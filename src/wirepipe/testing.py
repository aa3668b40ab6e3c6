"""Testing a pipeline without NATS or files: records in from a list, records out into a list.

``TestingSource`` gives the pipeline the records you hand it, in batches of ``batch_size``;
``RedeliveringSource`` does so at least once, as a durable JetStream consumer does (records come back
until acknowledged; a worker crash or stop placed among the records), so the delivery rules of the run
loop are tested in milliseconds;
``TestingSink`` keeps what the pipeline writes, in order (``.records``, with the subjects,
headers and meta columns beside them) and the records a stage rejected (``.rejects``, when
it is the dead-letter destination, which ``run`` makes it by default). ``run`` runs
``source | operators | sink`` to the end and returns the run's stats; ``between`` puts a
whole pipeline (one from YAML, say) between a testing source and sink. The same run loop
the CLI uses runs here: the batching, the operators, the dead-letter routing and the
commits are the real ones.

>>> from wirepipe.operators.map import Map
>>> from wirepipe.testing import TestingSink, TestingSource, run
>>> sink = TestingSink()
>>> stats = run(TestingSource([1, 2, 3], batch_size=2), [Map(lambda v: 10 // (v - 2))], sink)
>>> sink.records
[-10, 10]
>>> [(r.stage, r.value) for r in sink.rejects]
[('map', 2)]
>>> stats.batches, stats.records_out, stats.rejected
(2, 2, 1)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .connectors.connector import AtLeastOnce, Sink, Source
from .connectors.dictionary_stores import MemoryDictionaries
from .connectors.schema_registry import SchemaRegistry
from .core.batch import Batch, Rejected
from .core.stages import Stage
from .operators.operator import Operators
from .pipelines.pipeline import Pipeline
from .pipelines.stats import RunStats

__all__ = ["Crashed", "RedeliveringSource", "TestingSink", "TestingSource", "between", "memory_dictionaries",
           "memory_schema_registry", "run", "run_async"]


class TestingSource(Source):
    """The given records as batches of ``batch_size`` (the last one shorter), then the end.

    Each batch carries a ``seq`` meta column (the records' positions, from 0), ``subjects``
    and ``headers`` (one for all records, or one per record) when given, ``schema``, and
    ``raw_nbytes`` when ``raw_record_nbytes`` declares one record's raw size. ``meta`` adds
    meta columns by name, one value per record, cut per batch as ``subjects`` and ``headers``
    are: what a NATS source fills (``sent_ns``, ``received_ns``), chosen by the test (a
    ``seq`` given there replaces the positions). A list of records is read as it is, not copied,
    and each batch is cut from it when the run reads it (copying and cutting a million records up
    front cost a tenth of encoding them); ``TestingSource.from_batches`` takes the batches as they
    are (lists, not copied): the benchmarks time operators, not slicing.
    A single subject names the records in the source's ``params`` (a report calls them so,
    as it does a NATS source's).

    >>> from wirepipe.testing import TestingSink, TestingSource, run
    >>> sink = TestingSink()
    >>> _ = run(TestingSource.from_batches([[b"a", b"b"], [b"c"]], subjects="orders",
    ...                                    meta={"sent_ns": [10, None, 30], "received_ns": [15, 25, 35]}), [], sink)
    >>> sink.meta["sent_ns"], sink.meta["received_ns"], sink.meta["seq"]
    ([10, None, 30], [15, 25, 35], [0, 1, 2])
    """

    __test__ = False  # a class named Testing* is not a pytest test class
    type = "testing"
    stage = Stage.GENERATE

    def __init__(self, records: Iterable[Any], batch_size: int = 1000, *,
                 subjects: Sequence[str] | str | None = None,
                 headers: Sequence[dict[str, str] | None] | dict[str, str] | None = None,
                 meta: Mapping[str, Sequence[Any]] | None = None,
                 schema: Any = None, raw_record_nbytes: int | None = None) -> None:
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: {batch_size!r} is not allowed, expected a whole number >= 1")
        self._records: list[Any] = records if isinstance(records, list) else list(records)
        self._chunks: list[list[Any]] | None = None  # ``from_batches``'s lists; else cut from ``_records``
        self.schema = schema
        self.batch_size = batch_size
        self._columns(subjects, headers, meta)
        self.raw_record_nbytes = raw_record_nbytes  # declared raw size of one record (as the FlatMessage tables count it)

    @classmethod
    def from_batches(cls, batches: Iterable[list[Any]], *, subjects: Sequence[str] | str | None = None,
                     headers: Sequence[dict[str, str] | None] | dict[str, str] | None = None,
                     meta: Mapping[str, Sequence[Any]] | None = None, schema: Any = None,
                     raw_record_nbytes: int | None = None) -> TestingSource:
        """One batch per list given, in order, the lists themselves (the operators read, never mutate, them).

        ``subjects``, ``headers`` and ``meta`` run over all the records, cut at the batches' ends.
        """
        source = cls((), schema=schema, raw_record_nbytes=raw_record_nbytes)
        source._chunks = list(batches)
        source.batch_size = max((len(c) for c in source._chunks), default=1)
        source._columns(subjects, headers, meta)
        return source

    def _columns(self, subjects: Any, headers: Any, meta: Mapping[str, Sequence[Any]] | None) -> None:
        n = self._count()
        for name, column in (meta or {}).items():
            if isinstance(column, (str, bytes, dict)) or len(column) != n:
                got = f"a {type(column).__name__}" if isinstance(column, (str, bytes, dict)) else f"{len(column)} values"
                raise ValueError(f"meta[{name!r}]: expected one value per record ({n}), got {got}")
        self._subjects = subjects
        self._headers = headers
        self._meta = dict(meta or {})

    def _count(self) -> int:
        return len(self._records) if self._chunks is None else sum(len(c) for c in self._chunks)

    def _cut(self) -> Iterator[list[Any]]:
        """The batches' records: ``from_batches``'s lists, or ``batch_size`` records at a time."""
        if self._chunks is not None:
            yield from self._chunks
            return
        records, size = self._records, self.batch_size
        for start in range(0, len(records), size):
            yield records[start:start + size]

    @property
    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self._count(), "batch_size": self.batch_size}
        if isinstance(self._subjects, str):
            out["subject"] = self._subjects
        return out

    async def batches(self) -> AsyncIterator[Batch]:
        seq = 0
        for chunk in self._cut():
            if self.stopping.is_set():
                return
            n = len(chunk)
            meta = {"seq": range(seq, seq + n), **{k: _slice(c, seq, n) for k, c in self._meta.items()}}
            yield Batch(chunk, subjects=_slice(self._subjects, seq, n), headers=_slice(self._headers, seq, n),
                        meta=meta, schema=self.schema,
                        raw_nbytes=None if self.raw_record_nbytes is None else self.raw_record_nbytes * n)
            seq += n


def _slice(column: Any, start: int, n: int) -> Any:
    """A per-record column cut to one batch; a shared value (str, dict) or None as it is."""
    if column is None or isinstance(column, (str, dict)):
        return column
    return list(column[start:start + n])


class Crashed(Exception):
    """The run a ``RedeliveringSource.CRASH`` ended: the worker died there (what ``run`` and ``run_async`` raise)."""


class _Sentinel:
    """A mark among a ``RedeliveringSource``'s records: what happens when the stream reaches it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"RedeliveringSource.{self.name}"


class RedeliveringSource(TestingSource, AtLeastOnce):
    """The given records delivered at least once, as a durable JetStream consumer delivers them: a record
    comes back until the pipeline acknowledges it (``ack``, after the sink's flush) or settles it as a dead
    letter (``settle_rejected``, after the dead letter's flush).

    A record delivered and not settled is delivered again at the start of the next run of this source (the
    worker restarted), and during a run once ``ack_wait`` seconds passed since it was delivered or last kept
    ``in_progress`` (the server gives it to a reader again). Each batch carries the meta columns a JetStream
    batch has: ``seq`` (the record's position, from 0), ``ack`` (its handle: the position) and ``delivered``
    (1 the first time). A run ends when every record has been delivered and settled.

    Marks among the records, each acted on once, when the stream first reaches it (batches are cut there):

    - ``RedeliveringSource.CRASH``: the worker dies there. The run is cancelled wherever it is, so nothing
      more is acknowledged, and ``run`` raises ``Crashed``; running the same source again restarts the worker.
    - ``RedeliveringSource.STOP``: the worker is stopped there and drains (what it wrote is flushed and
      acknowledged); the next run goes on after the mark.

    What happened is kept across runs: ``acked`` and ``terminated`` (positions, in the order settled),
    ``deliveries`` (per position), ``redelivered`` (deliveries after the first), ``in_progress_calls`` and
    ``crashes``.

    >>> from wirepipe.testing import Crashed, RedeliveringSource, TestingSink, run
    >>> source = RedeliveringSource(["a", "b", RedeliveringSource.CRASH, "c"], batch_size=1)
    >>> sink = TestingSink()
    >>> try:
    ...     run(source, [], sink)
    ... except Crashed:
    ...     pass
    >>> _ = run(source, [], sink)  # the restarted worker gets what was not acknowledged, then the rest
    >>> sink.records[-3:], source.acked, source.redelivered
    (['a', 'b', 'c'], [0, 1, 2], 2)
    """

    CRASH = _Sentinel("CRASH")
    STOP = _Sentinel("STOP")

    def __init__(self, records: Iterable[Any], batch_size: int = 1000, *, ack_wait: float = 30.0,
                 ack_pressure: int = 1000, **columns: Any) -> None:
        values: list[Any] = []
        self._marks: dict[int, _Sentinel] = {}  # position -> the mark before that record
        for record in records:
            if isinstance(record, _Sentinel):
                self._marks[len(values)] = record
            else:
                values.append(record)
        super().__init__(values, batch_size, **columns)
        if ack_wait <= 0 or ack_pressure < 1:
            raise ValueError(f"ack_wait ({ack_wait!r}) must be > 0 and ack_pressure ({ack_pressure!r}) >= 1")
        self._ack_wait = ack_wait
        self._ack_pressure = ack_pressure
        self._next = 0  # the first position never delivered
        self._pending: dict[int, float] = {}  # delivered, not settled: position -> when it is redelivered
        self.deliveries = [0] * len(values)
        self.acked: list[int] = []
        self.terminated: list[int] = []
        self.in_progress_calls = 0
        self.crashes = 0
        self._run: asyncio.Task[Any] | None = None  # the run's task (the one that opened the source), for CRASH
        self._cancels = 0  # how many times CRASH cancelled the run (0: it did not)
        self._settled: asyncio.Event | None = None

    @property
    def ack_wait(self) -> float:
        return self._ack_wait

    @property
    def ack_pressure(self) -> int:
        return self._ack_pressure

    @property
    def redelivered(self) -> int:
        return sum(self.deliveries) - sum(1 for n in self.deliveries if n)

    def wants_commit(self) -> bool:
        """Every record was delivered: the loop commits at once rather than after ``flush_interval``."""
        return self._next >= len(self._records) and not self._marks

    async def open(self) -> None:
        if self._cancels:  # the crashed run's clean-up set it
            self.stopping.clear()
            self._cancels = 0
        self._run = asyncio.current_task()
        self._settled = asyncio.Event()
        for position in self._pending:  # a new reader: every record delivered earlier and not settled comes back
            self._pending[position] = 0.0

    async def batches(self) -> AsyncIterator[Batch]:
        size = self.batch_size
        while not self.stopping.is_set():
            now = time.monotonic()
            due = [p for p, deadline in self._pending.items() if deadline <= now]
            if due:
                yield self._deliver(sorted(due)[:size])
                continue
            mark = self._marks.pop(self._next, None)
            if mark is self.STOP:
                return
            if mark is self.CRASH:
                await self._crash()
            if self._next < len(self._records):
                end = min([self._next + size, len(self._records), *(p for p in self._marks if p > self._next)])
                positions, self._next = range(self._next, end), end
                yield self._deliver(positions)
            elif not self._pending:
                return
            else:  # the last records are out: wait for their settling, their redelivery or a stop
                assert self._settled is not None
                self._settled.clear()
                waits = [asyncio.ensure_future(e.wait()) for e in (self._settled, self.stopping)]
                timeout = max(min(self._pending.values()) - time.monotonic(), 0.0)
                try:
                    await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()

    def _deliver(self, positions: Sequence[int]) -> Batch:
        deadline = time.monotonic() + self.ack_wait
        for p in positions:
            self.deliveries[p] += 1
            self._pending[p] = deadline
        meta = {"seq": list(positions), **{k: _pick(c, positions) for k, c in self._meta.items()},
                "ack": list(positions), "delivered": [self.deliveries[p] for p in positions]}
        n = len(positions)
        return Batch([self._records[p] for p in positions], subjects=_pick(self._subjects, positions),
                     headers=_pick(self._headers, positions), meta=meta, schema=self.schema,
                     raw_nbytes=None if self.raw_record_nbytes is None else self.raw_record_nbytes * n)

    async def _crash(self) -> None:
        """Cancel the run wherever it is, as a killed worker stops; this generator ends when the run's clean-up
        cancels it. Cancelled again meanwhile: asyncio.wait_for (3.11) can swallow a cancel that lands as the
        item it waits for arrives."""
        assert self._run is not None
        self.crashes += 1
        while True:
            self._run.cancel()
            self._cancels += 1
            await asyncio.sleep(0.001)

    def _settle(self, positions: Iterable[int | None], into: list[int]) -> None:
        for p in positions:
            if p is not None:
                self._pending.pop(p, None)
                into.append(p)
        if self._settled is not None:
            self._settled.set()

    async def ack(self, batch: Batch) -> None:
        self._settle(batch.meta.get("ack") or (), self.acked)

    async def settle_rejected(self, rejected: list[Rejected]) -> None:
        self._settle((r.meta.get("ack") for r in rejected), self.terminated)

    async def in_progress(self, batches: list[Batch]) -> None:
        self.in_progress_calls += 1
        deadline = time.monotonic() + self.ack_wait
        for batch in batches:
            for p in batch.meta.get("ack") or ():
                if p in self._pending:
                    self._pending[p] = deadline


def _pick(column: Any, positions: Sequence[int]) -> Any:
    """A per-record column at ``positions``; a shared value (str, dict) or None as it is."""
    if column is None or isinstance(column, (str, dict)):
        return column
    return [column[p] for p in positions]


class TestingSink(Sink):
    """Keeps what the pipeline writes, in order, for assertions.

    ``records``  the values written, in order (``keep=False``: only counted, in ``count``)
    ``subjects`` and ``headers``: one entry per kept record (``None`` where the batch had none)
    ``meta``     each meta column of the kept records, by name
    ``rejects``  the ``Rejected`` records, when this sink is the dead-letter destination
    ``count``, ``batches``, ``flushes``: how many records and batches were written, flushes made
    """

    __test__ = False
    type = "testing"
    stage = Stage.WRITE

    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep
        self.records: list[Any] = []
        self.subjects: list[str | None] = []
        self.headers: list[dict[str, str] | None] = []
        self.meta: dict[str, list[Any]] = {}
        self.rejects: list[Rejected] = []
        self.count = 0
        self.batches = 0
        self.flushes = 0

    async def write(self, batch: Batch) -> None:
        n = len(batch.values)
        self.count += n
        self.batches += 1
        if not self.keep:
            return
        self.records += batch.values
        self.subjects += [batch.subject_at(i) for i in range(n)]
        self.headers += [batch.headers_at(i) for i in range(n)]
        for name, column in batch.meta.items():
            self.meta.setdefault(name, []).extend(column)

    async def write_rejected(self, rejected: list[Rejected]) -> None:
        self.rejects += rejected

    async def flush(self) -> None:
        self.flushes += 1


def run(source: Source, operators: Operators = (), sink: Sink | None = None, *,
        dead_letter: Sink | None = None, **options: Any) -> RunStats:
    """Run ``source | operators | sink`` to the end in a new event loop; its stats.

    Rejected records go to ``dead_letter``, or to ``sink`` when it is a ``TestingSink``
    (its ``rejects``). ``options`` are ``Pipeline``'s (``metrics``, ``queue_size`` ...).
    """
    return asyncio.run(run_async(source, operators, sink, dead_letter=dead_letter, **options))


def between(pipeline: Pipeline, source: Source, sink: TestingSink) -> Pipeline:
    """``pipeline`` as written (its operators, name, batching and flush settings) between other ends:
    ``source`` instead of its source, ``sink`` instead of its sink, and ``sink.rejects`` where its
    dead letter was (every rejected record is kept, whether the pipeline has a dead letter or not).
    Its metrics and monitor are left out: a test writes no results. What ``wirepipe test`` runs.

    >>> from wirepipe import generate_source, map_values, null_sink
    >>> sink = TestingSink()
    >>> _ = between(generate_source("point", count=5) | map_values(lambda r: r["x"]) | null_sink(),
    ...             TestingSource([{"x": 1}, {"y": 2}]), sink).run()
    >>> sink.records, [r.stage for r in sink.rejects]
    ([1], ['map'])
    """
    return Pipeline(source, pipeline.operators, sink, name=pipeline.name, dead_letter=sink,
                    queue_size=pipeline.queue_size, shutdown_timeout=pipeline.shutdown_timeout,
                    flush_interval=pipeline.flush_interval, config=pipeline.config, resources=pipeline.resources)


def memory_schema_registry(schemas: Mapping[str, Sequence[Any]] | None = None, *, compatibility: str = "backward",
                           retry_after: float = 30.0) -> SchemaRegistry:
    """A schema registry in this process, for a pipeline's ``resources`` in a test: ``schemas`` registers each
    name's versions in order (schemas as ``schema:`` takes them: mappings, files, datasets), under ``compatibility``.

    >>> from wirepipe import deserialize, serialize
    >>> registry = memory_schema_registry({"points": [{"x": "int32"}, {"x": "int32", "label?": "string"}]})
    >>> resources = {"schemas": {"registry": registry}}
    >>> sent, read = TestingSink(), TestingSink()
    >>> _ = run(TestingSource([{"x": 1}]), [serialize("bincode", schema="registry/points@1")], sent, resources=resources)
    >>> _ = run(TestingSource(sent.records, headers=sent.headers), [deserialize("bincode", schema="registry/points")],
    ...         read, resources=resources)
    >>> read.records
    [{'x': 1, 'label': None}]
    """
    from .connectors.schema_registry import MemoryBackend
    from .operators.schema_options import resolve_schema

    registry = SchemaRegistry(MemoryBackend(), retry_after=retry_after)

    async def push() -> None:
        for name, versions in (schemas or {}).items():
            for spec in versions:
                schema = resolve_schema(spec)
                assert schema is not None, f"{name}: a version is a schema, not None"
                await registry.push(name, schema, compatibility)

    asyncio.run(push())
    return registry


def memory_dictionaries(named: Mapping[str, bytes] | None = None, *, retry_after: float = 30.0) -> MemoryDictionaries:
    """zstd dictionaries in this process, for a pipeline's ``resources`` in a test: ``named`` maps each name (what
    ``compress: {dictionary: nats://STORE/NAME}`` asks for) to a trained dictionary's bytes, which a ``decompress``
    finds by the id its frames carry; ``add(data)`` keeps one more.

    >>> import zstandard
    >>> from wirepipe import compress, decompress
    >>> trained = zstandard.train_dictionary(1024, [b'{"id": %d, "status": "shipped"}' % i for i in range(500)])
    >>> resources = {"dictionaries": {"DICTS": memory_dictionaries({"tx": trained.as_bytes()})}}
    >>> sent, read = TestingSink(), TestingSink()
    >>> _ = run(TestingSource([b'{"id": 7, "status": "shipped"}']), [compress("zstd", dictionary="nats://DICTS/tx")],
    ...         sent, resources=resources)
    >>> _ = run(TestingSource(sent.records, headers=sent.headers), [decompress("auto", dictionaries="nats://DICTS")],
    ...         read, resources=resources)
    >>> read.records
    [b'{"id": 7, "status": "shipped"}']
    """
    return MemoryDictionaries(named, retry_after=retry_after)


async def run_async(source: Source, operators: Operators = (), sink: Sink | None = None, *,
                    dead_letter: Sink | None = None, **options: Any) -> RunStats:
    """``run`` inside a running event loop (a test that also runs a server or a publisher)."""
    if dead_letter is None and isinstance(sink, TestingSink):
        dead_letter = sink
    options.setdefault("name", "testing")
    try:
        return await Pipeline(source, operators, sink, dead_letter=dead_letter, **options).run_async()
    except asyncio.CancelledError:
        if not (isinstance(source, RedeliveringSource) and source._cancels):
            raise
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):  # the cancels were the crash's, not the caller's
            for _ in range(source._cancels):
                task.uncancel()
        raise Crashed(f"the worker crashed at a RedeliveringSource.CRASH ({source.crashes} so far)") from None
