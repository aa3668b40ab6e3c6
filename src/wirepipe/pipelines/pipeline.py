"""Pipeline assembly and the run loop.

A pipeline is a source, a list of CPU operators and a sink. The run loop reads
batches from the source into a bounded queue (a slow sink slows the source down,
memory stays flat), runs every operator over each batch, routes rejected records to
the dead-letter destination and writes the batch to the sink. With metrics on, each
stage of each batch is stamped. A pipeline that names no dead-letter destination writes its
rejected records to a JSONL file beside its output (``dead_letters.py``): none is thrown away,
and the run's ``RunStats.rejections`` count them by stage, operator and reason.

Acknowledgement (at-least-once sources such as JetStream): a record is acknowledged
only once the sink has made it durable: the loop notes what it wrote in the ack ledger and
*commits* every ``flush_interval`` (``commits.py``: flush, then ack and settle).

A failed write or flush is the sink's condition, never the records' (``connectors/connector.py``):
the loop holds every record it has (in the sink, in the queue), keeps a redelivering source
from sending them again (``in_progress``; nothing is ``nak``-ed), waits and retries the same
write or flush for as long as it takes (``sink_retry.py``). Only records a stage or the sink
refuses for their own sake (a value it cannot represent) go to the dead-letter destination.

The parts declare what the pipeline must check (``Sink.refuse_source``: e.g. one Parquet file
behind a source acknowledged at every flush): ``check_parts`` runs it for every pipeline, built
from YAML or in Python, when it is constructed and again when it starts. What flows between them
is checked there too (``check_flow``): the kind of values each operator and the sink take (records
or payloads) and the schema a positional format takes from its source, so ``wirepipe validate``
refuses what a run would otherwise refuse at its first batch. It also refuses a dead
letter published where the source reads (``Source.subjects``, ``Sink.publishes_to``): each
dead letter would come back, fail again and be dead-lettered again, forever; a JetStream
source's stream subjects are known once it is open, so the check runs again then. A record
that still comes back with this pipeline's own dead-letter headers is not dead-lettered again.

A stop past ``shutdown_timeout`` cancels the run: what the loop had read and not written (in
its queue, in the operators, in the sink's write) is handed to ``Source.discard``, so a source
that cannot redeliver (core NATS) counts it lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..connectors.connector import AtLeastOnce, Sink, Source, Unreadable
from ..core import collector
from ..core.allocator import between_batches
from ..core.batch import PAYLOADS, SAME, Batch, Rejected, payload_nbytes
from ..core.errors import ConfigError, SinkUnavailable, WirepipeError
from ..core.rejections import Rejections
from ..operators.operator import Operator, Operators, flatten
from ..wire import Header, subjects_overlap
from .commits import AckLedger
from .sink_retry import SinkRetry

if TYPE_CHECKING:
    from ..core.exit_codes import Outcome
    from ..metrics.recorder import Stamps

log = logging.getLogger("wirepipe")
_ns = time.monotonic_ns
_RECEIVED = "wirepipe.received"  # meta column: the records as the source gave them, while the sink writes
_COMMIT_POLL = 0.25  # seconds: how often a loop waiting for a batch asks whether a commit is due
_WAKE: Any = object()  # a queue item that only wakes a loop waiting for a batch (a switch was asked for)
# Operators expected to hold the event loop longer than this run off it (sources with a socket to serve).
_OFFLOAD_NS = 2_000_000
_SLICE_NS = 1_000_000
# How: "slice" (default: slices of the batch between which the event loop runs; record-wise operators,
# metrics off) or "thread" (asyncio.to_thread; also used for `pack` and with metrics). Measured in
# benchmarks/core_overload.py; WIREPIPE_OPERATOR_OFFLOAD=thread forces the thread for comparisons.
_OFFLOAD_MODE = os.environ.get("WIREPIPE_OPERATOR_OFFLOAD", "slice")


def run_operators(operators: Sequence[Operator], batch: Batch, timed: bool = False) -> tuple[Batch, Stamps | None]:
    """The one loop over the operators (``Pipeline.process_batch`` and its sliced and threaded forms run it).

    ``timed`` reads the clock when each operator starts and ends and sizes each operator's
    output column between the two, off the stage's clock, while the column is still in the
    CPU's cache (sized after the pass, the same sums took ~1.3x as long); the columns
    themselves are not kept, so each is freed as soon as the next stage replaced it.
    Safe in a thread: it touches no shared state.
    """
    ns = _ns
    stamps: Stamps | None = None  # nothing is allocated for an untimed pass (the sliced path runs many)
    if timed:
        stamps = ([], [], [batch.record_count()], [len(batch.rejected)], [payload_nbytes(batch.values)],
                  [batch.projected], [len(batch.values)])
    for op in operators:
        if stamps is not None:
            stamps[0].append(ns())
        batch = op(batch)
        if stamps is not None:
            _, ends, records, rejected, sizes, projected, messages = stamps
            ends.append(ns())
            values = batch.values
            records.append(batch.record_count())
            messages.append(len(values))
            rejected.append(len(batch.rejected))
            sizes.append(payload_nbytes(values))
            projected.append(batch.projected)
    return batch, stamps


@dataclass
class RunStats:
    """What a run did: counts in and out, rejects by stage and by reason, wall time."""

    batches: int = 0
    records_in: int = 0  # read and taken through (a cut run hands what it could not finish back to its source)
    records_out: int = 0
    messages_out: int = 0  # values written: messages on the wire, several records each after ``pack``
    rejected: int = 0
    bytes_out: int = 0
    acked: int = 0
    sink_errors: int = 0  # failed sink writes or flushes (each retried)
    commits: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed: float = 0.0
    opened: float | None = None  # seconds from the start until every part was open (a wait for a stream included)
    rejected_by_stage: dict[str, int] = field(default_factory=dict)
    rejections: Rejections = field(default_factory=Rejections)  # by stage, operator and reason
    projected: int = 0  # records whose undeclared fields serialize dropped (extra_fields: drop)
    # What the source knows it lost (core NATS: gaps, client drops, discarded at stop), None if it cannot lose.
    losses: dict[str, int] | None = None
    redelivered: int = 0  # records read that had been delivered before (``Source.redelivered``)
    # Records still awaiting acknowledgement or redelivery when a bounded run ended (``Source.outstanding``; a cut
    # drain's unacknowledged records too): exit 6.
    outstanding: int = 0
    deduplicated: int = 0  # records the sink's destination already had (``Sink.deduplicated``)
    unreadable: list[Unreadable] = field(default_factory=list)  # input the source went past (``Source.unreadable``)
    interrupted: bool = False  # a bounded run stopped by SIGINT before its end, after a clean drain (worker.py)
    cut: str | None = None  # the drain was cut (shutdown_timeout, a second signal): what it left (worker.py)
    unconfirmed: int = 0  # records published and not confirmed by the server when the drain was cut
    sink_error: str | None = None  # the sink still failed when the drain was cut (what it held is not settled)
    # What writing the metrics met (``MetricsRecorder.figures``: rows a full disk delayed, failed writes, values
    # clamped or nulled), None without metrics.
    metrics: dict[str, int] | None = None

    @property
    def lost(self) -> int:
        return self.losses["lost"] if self.losses else 0

    def outcome(self) -> Outcome:
        """What the run's exit code follows (``exit_codes.verdict``)."""
        from ..connectors.connector import describe_unreadable
        from ..core.exit_codes import Outcome

        failures = [describe_unreadable(self.unreadable)] if self.unreadable else []
        if self.unconfirmed:
            failures.append(f"{self.unconfirmed:,} record(s) published and not confirmed by the server when the "
                            "drain was cut: whether they were stored is unknown")
        if self.sink_error:
            failures.append(f"the sink still failed when the drain was cut ({self.sink_error}): what it held was "
                            "not acknowledged")
        unwritten = (self.metrics or {}).get("metrics_rows_unwritten", 0)
        if unwritten:
            failures.append(f"{unwritten:,} metrics row(s) not written: the disk still refused them when the run "
                            "was stopped")
        return Outcome(records=self.records_in, rejected=self.rejected, lost=self.lost,
                       unsure=(self.losses or {}).get("unsure", 0), outstanding=self.outstanding,
                       interrupted=self.interrupted, failures=failures)

    def working(self) -> float:
        """Seconds of work so far: since every part was open (0 while opening or waiting for a stream)."""
        if self.opened is None:
            return 0.0
        end = self.started + self.elapsed if self.elapsed else time.monotonic()
        return max(0.0, end - self.started - self.opened)

    @property
    def records_per_second(self) -> float:
        return self.records_out / self.elapsed if self.elapsed > 0 else 0.0


def check_parts(source: Source, sink: Sink | None, dead_letter: Sink | None, operators: Sequence[Operator] = ()
                ) -> None:
    """The rules that belong to a whole pipeline, as its parts declare them: ``ConfigError`` at the field of
    the part that cannot follow the source (YAML adds the file; the message is the same)."""
    check_flow(source, operators, sink)
    for where, part in (("sink", sink), ("dead_letter", dead_letter)):
        refusal = part.refuse_source(source) if part is not None else None
        if refusal is not None:
            raise ConfigError(refusal.message, path=f"{where}.{refusal.field}")
    check_dead_letter_loop(source, dead_letter)


def check_dead_letter_loop(source: Source, dead_letter: Sink | None) -> None:
    """``ConfigError`` at ``dead_letter.subject`` when the source reads what the dead letter publishes."""
    template = dead_letter.publishes_to if dead_letter is not None else None
    read = source.subjects
    if template is None or not read:
        return
    loops = [s for s in read if subjects_overlap(s, template)]
    if not loops:
        return
    what = f"subject {loops[0]!r}" if len(read) == 1 else f"subjects {', '.join(map(repr, read))}"
    other = "dlq." + template
    hint = f" such as {other!r}" if not any(subjects_overlap(s, other) for s in read) else ""
    raise ConfigError(f"{template!r} is read by the source ({source.type} {what}): every dead letter would come "
                      f"back to this pipeline, fail again and be dead-lettered again, forever; publish dead "
                      f"letters on a subject the source does not read{hint}", path="dead_letter.subject")


def check_flow(source: Source, operators: Sequence[Operator], sink: Sink | None,
               where: Sequence[str] | None = None) -> None:
    """What each operator and the sink declare they take from upstream (``operators/operator.py``): the kind of
    values, records or payloads, as far as the parts before them tell it, and the schema the source attaches
    for a positional format given none. ``ConfigError`` at the part's field (``where``: each operator's path
    in a YAML file; ``operators[i].<stage>`` by default)."""
    kind, origin = source.gives, f"the source ({source.type})"
    for i, op in enumerate(operators):
        at = where[i] if where is not None else f"operators[{i}].{op.stage}"
        refusal = op.refuse_schema(source.schema)
        if refusal is not None:
            raise ConfigError(refusal.message, path=f"{at}.{refusal.field}")
        if op.takes is not None and kind is not None and kind != op.takes:
            raise ConfigError(_misfit(f"{op.stage} ({op.name}) works on", op.takes, kind, origin), path=at)
        if op.gives != SAME:
            kind, origin = op.gives, f"{at} ({op.name})"
    takes = sink.takes if sink is not None else None
    if takes is not None and kind is not None and kind != takes:
        raise ConfigError(_misfit(f"the {sink.type} sink writes", takes, kind, origin), path="sink")  # type: ignore[union-attr]


def _misfit(what: str, takes: str, kind: str, origin: str) -> str:
    if takes == PAYLOADS:
        return f"{what} payloads (bytes), but {origin} gives decoded {kind}: put a `serialize` before it"
    return f"{what} decoded {takes}, but {origin} gives {kind} (bytes): put a `deserialize` before it"


class Pipeline:
    """A source, CPU operators and a sink, run as one asyncio task; ``resources`` are the stores its operators
    read from (a schema registry, zstd dictionaries: ``pipelines/resources.py``), handed to them here (or, put
    together with ``|`` before its sink, when it runs) and opened before them.

    Build it directly, ``Pipeline(source, [ops...], sink)``, with ``source | op | sink``,
    or from YAML with ``wirepipe.pipelines.config.load_pipeline``; an ``OperatorChain`` (``encode``'s,
    ``op | op``) goes wherever an operator does, each of its operators a stage of its own. ``|`` returns a new
    pipeline (the operators added, or the sink set) and leaves the one it was applied to
    as it was, so one base can be extended two ways:

    >>> from wirepipe import compress, generate_source, serialize
    >>> base = generate_source("point", count=10) | serialize("msgpack")
    >>> zstd, lz4 = base | compress("zstd"), base | compress("lz4")
    >>> [op.name for op in zstd.operators], [op.name for op in lz4.operators], len(base.operators)
    (['msgpack', 'zstd'], ['msgpack', 'lz4'], 1)
    """

    def __init__(self, source: Source, operators: Operators = (), sink: Sink | None = None, *,
                 name: str = "pipeline", metrics: Any = None, dead_letter: Sink | None = None,
                 queue_size: int = 8, shutdown_timeout: float = 30.0, flush_interval: float = 1.0,
                 config: dict[str, Any] | None = None, monitor: Any = None, tracing: Any = None,
                 resources: Any = None) -> None:
        from .resources import Resources

        operators = flatten(operators)
        check_parts(source, sink, dead_letter, operators)
        self.source = source
        self.operators = operators
        # the stores operators read from (a schema registry), each handed to the operators that name it
        self.resources = resources if isinstance(resources, Resources) else Resources(resources)
        if sink is not None:  # put together with | (no sink yet), at its run: its stores may need the sink's server
            self.resources.bind(self.operators, (source, sink))
        self.sink = sink
        self.name = name
        self.metrics_spec = metrics
        self.dead_letter = dead_letter
        # where rejects go without a ``dead_letter``, and what a dead_letter refuses (dead_letters.py): set at start
        self.default_dead_letter: Sink | None = None
        self.dead_letter_role: str | None = None  # names that file apart (a replay's: ``out.replay.dead.jsonl``)
        self.queue_size = queue_size
        self.shutdown_timeout = shutdown_timeout
        self.flush_interval = flush_interval
        self.config = config
        self.monitor = monitor
        # OpenTelemetry (tracing.py): None decides by the OTEL_* variables; False, True, a TracingConfig or a
        # tracer provider. ``self.tracing`` is the run's tracer, None when off (the hooks below test only that).
        self.tracing_spec = tracing
        self.tracing: Any = None
        self._stamps: Stamps | None = None  # the last timed pass's stamps, for the tracer
        self.stats = RunStats()
        self.metrics: Any = None
        self._ledger = AckLedger(source)  # written and not committed; dead-lettered and not settled
        self._queued: list[Batch] = []  # read, waiting in the queue (kept alive while the sink is down)
        self._retry = SinkRetry(source, self._held)
        self.running = False
        self.active_monitor: Any = None  # the Monitor of the current run (its Prometheus port, for tests)
        self._op_ns_per_record: float | None = None  # measured cost of the operators, to decide offloading
        self._lost_seen = 0
        # Called after every commit (a pool worker reports its counters then: what it committed is counted even
        # if it is killed right after)
        self.after_commit: list[Callable[[], None]] = []
        # The batch between the queue and the sink: (records read, stats.rejected when it started).
        self._in_flight: tuple[int, int] | None = None
        self._came_back = 0  # records with this pipeline's own dead-letter headers, not dead-lettered again
        self._preparing: list[Operator] = []  # operators whose prepare(batch) the loop awaits before a pass
        self.read_to_end = False  # the source ended on its own (its input, its count): a stop after it interrupts nothing
        # A hot reload (``reload.py``): ``reloader.watch(self)`` runs beside the loop while the run lasts and asks
        # for a switch to another config's operators (``switch_to``); ``config_digest`` names the config the
        # batches run under (the metrics' ``config_digest`` column).
        self.reloader: Any = None
        self.config_digest: str | None = None
        self._switch: tuple[Pipeline, asyncio.Future[int]] | None = None
        self._queue: asyncio.Queue[Any] | None = None  # the loop's queue while it runs
        self._opened: list[Any] = []  # the parts open, closed last first at the end (a switch changes them)
        self._flusher: asyncio.Task[None] | None = None  # the metrics' periodic flush

    def __or__(self, other: Operator | Operators | Sink) -> Pipeline:
        """``pipeline | op``, ``pipeline | [ops]``, ``pipeline | sink``: a new pipeline with the rest of this one's
        settings (name, dead letter, metrics, timeouts...); this one is left as it was."""
        operators, sink = self.operators, self.sink
        if isinstance(other, Operator):
            operators = [*operators, other]
        elif isinstance(other, Sink):
            sink = other
        elif isinstance(other, Iterable) and not isinstance(other, (str, bytes)):
            operators = [*operators, *flatten(other)]
        else:
            return NotImplemented
        return type(self)(self.source, operators, sink, name=self.name, metrics=self.metrics_spec,
                          dead_letter=self.dead_letter, queue_size=self.queue_size,
                          shutdown_timeout=self.shutdown_timeout, flush_interval=self.flush_interval,
                          config=self.config, monitor=self.monitor, tracing=self.tracing_spec,
                          resources=self.resources)

    @property
    def unacked_records(self) -> int:
        """Records written to the sink and not yet committed (flushed and acknowledged upstream)."""
        return self._ledger.records

    @property
    def sink_error(self) -> str | None:
        """``"<sink>: <error>"`` while a sink fails and its records are held (status: "sink unavailable: ...")."""
        return self._retry.error

    def _held(self) -> tuple[list[Batch], int]:
        """What the loop holds besides a batch being written, kept alive while a sink fails: the batches written
        and not committed and those waiting in the queue, and the records they hold."""
        written = self._ledger.written
        return ([*(b for b, _ in written), *self._queued],
                self._ledger.records + sum(len(b.values) for b in self._queued))

    def __repr__(self) -> str:
        parts = [self.source.name, *(f"{op.stage}({op.name})" for op in self.operators),
                 self.sink.name if self.sink else "null"]
        return f"Pipeline({self.name!r}: {' | '.join(parts)})"

    # --- running -----------------------------------------------------------------------------

    def run(self) -> RunStats:
        """Run to completion (bounded source) or until interrupted; returns the run's stats."""
        return asyncio.run(self.run_async())

    async def run_async(self, stop: asyncio.Event | None = None) -> RunStats:
        """Run inside an existing event loop; setting ``stop`` drains and ends the run."""
        from ..connectors.null import NullSink

        source = self.source
        sink = self.sink if self.sink is not None else NullSink()
        check_parts(source, sink, self.dead_letter, self.operators)  # attributes may have been set since construction
        self.resources.bind(self.operators, (source, sink))  # put together with |, it has its sink only now
        self._preparing = [op for op in self.operators if op.prepares]
        if stop is not None:
            source.stopping = stop
        self.stats = stats = RunStats()
        self.read_to_end = False
        self._queued, self._ledger, self._retry = [], AckLedger(source), SinkRetry(source, self._held)
        from .dead_letters import DefaultDeadLetter, default_path

        # Without a dead_letter, where rejects go; with one, where what it refuses for itself goes.
        self.default_dead_letter = DefaultDeadLetter(default_path(self.name, self.sink, self.metrics_spec,
                                                                  self.dead_letter_role))
        self.metrics = self._open_metrics()
        self.tracing = _open_tracing(self)
        timer = watching = self._flusher = None
        if self.metrics is not None:
            self._start_metrics(self.metrics, source, self.operators, sink)
        self._opened = []
        cancelled = cancelled_late = False
        for part in (sink, self.dead_letter):
            if part is not None:
                part.bind(self.name, source)  # e.g. the JetStream sink's default Nats-Msg-Id names both
        monitor = None
        if self.monitor is not None:
            from .monitor import Monitor

            monitor = self.active_monitor = Monitor(self, self.monitor)
            await monitor.start()
        try:
            collector.run_started()  # the garbage collector for batches (core/collector.py)
            await self._open_parts(source, sink, self._opened)
            if source.duration:
                timer = asyncio.get_running_loop().call_later(source.duration, source.stopping.set)
            self.running = True
            stats.opened = time.monotonic() - stats.started
            if self.metrics is not None:
                self.metrics.mark_opened()
            if self.reloader is not None:
                watching = asyncio.create_task(self.reloader.watch(self))
            await self._loop(source, sink, stats)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            self.running = False
            if watching is not None:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            if self._switch is not None:  # asked for while the run ended: it never ran
                self._switch[1].cancel()
                self._switch = None
            if monitor is not None:
                await monitor.stop()
            if timer is not None:
                timer.cancel()
            await self._close_parts(self._opened)
            if self._flusher is not None:
                self._flusher.cancel()
            if self.metrics is not None:
                found_late = source.lost - self._lost_seen  # discarded at the drain, a tail: on the source's rows too
                if found_late:
                    self._lost_seen += found_late
                    self.metrics.stamp_source_lost(stats.batches, found_late)
                # a full disk is waited out as a sink's is; not once the run is cancelled (a deadline passed)
                try:
                    await self.metrics.aclose(wait=not cancelled)
                except asyncio.CancelledError:  # the deadline passed while they waited: the figures are still set
                    cancelled_late = True
                stats.metrics = self.metrics.figures()
            if self.tracing is not None:
                self.tracing.finish()
            collector.run_ended()
            stats.elapsed = time.monotonic() - stats.started
            stats.losses = source.losses()
            stats.redelivered = source.redelivered
            stats.outstanding = source.outstanding
            stats.deduplicated = sink.deduplicated
            stats.unreadable = source.unreadable()
        if cancelled_late:
            raise asyncio.CancelledError
        return stats

    async def _open_parts(self, source: Source, sink: Sink, opened: list[Any]) -> None:
        """Open the source, the sink, the dead letter and the operators, in that order; each one opened is
        appended to ``opened`` (closed in reverse by ``_close_parts``, even when a later one fails)."""
        await source.open()
        opened.append(source)
        check_dead_letter_loop(source, self.dead_letter)  # a JetStream stream's subjects are known now
        with _io_errors(f"sink {sink.name}", None):
            await sink.open()
        opened.append(sink)
        if self.dead_letter is not None:
            with _io_errors(f"dead_letter {self.dead_letter.name}", None):
                await self.dead_letter.open()
            opened.append(self.dead_letter)
        opened.append(self.resources)  # the stores operators read from (a schema registry), opened before them
        await self.resources.open()
        for op in self.operators:  # their I/O (a dictionary fetched from NATS), after the parts they may use
            opened.append(op)  # closed even when its open fails half-way (a connection made, then a refusal)
            await op.open((source, sink))

    async def _close_parts(self, opened: list[Any]) -> None:
        """Close what ``_open_parts`` opened, last first; a part that fails to close is logged, the others close."""
        if self.default_dead_letter is not None:
            opened.insert(1, self.default_dead_letter)  # opened at its first record, closed after the sink
        await self._close_each(opened)

    @staticmethod
    async def _close_each(parts: Sequence[Any]) -> None:
        """Close ``parts``, last first; a part that fails to close is logged, the others close."""
        for part in reversed(parts):
            try:
                await part.close()
            except Exception as exc:
                log.error("closing %s failed: %s", part.name, exc)

    def _open_metrics(self) -> Any:
        spec = self.metrics_spec
        if spec is None:
            return None
        from ..metrics.recorder import MetricsRecorder

        if isinstance(spec, MetricsRecorder):
            return spec
        return MetricsRecorder(Path(spec), pipeline=self.name, config=self.config)

    def _start_metrics(self, recorder: Any, source: Source, operators: Sequence[Operator], sink: Sink) -> None:
        """Open ``recorder`` for these stages and start its periodic flush."""
        from ..metrics.recorder import pipeline_stages

        if self.config_digest is not None:
            recorder.config_digest = self.config_digest
        with _io_errors("metrics", recorder.path):
            recorder.open(pipeline_stages(source, operators, sink))
        self._flusher = asyncio.create_task(recorder.flush_periodically())

    # --- a hot reload ------------------------------------------------------------------------------

    def switch_to(self, new: Pipeline) -> asyncio.Future[int]:
        """Go on with ``new``'s operators, dead letter, metrics, ``flush_interval``, ``shutdown_timeout`` and config
        from the next batch boundary, once what this config wrote is committed (flushed, then acknowledged): a
        hot reload (``reload.py``). ``new`` itself never runs: its source, sink, name, queue, monitor and tracing
        are not used (changing those needs a restart: ``reload.py`` refuses it before asking). Parts that ``new``
        shares with this pipeline (the same objects) stay open as they are. The future's result is the index of
        the first batch that ``new``'s parts run; its error, what kept this pipeline's (a part that cannot open)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self.running or self.source.stopping.is_set():
            future.set_exception(WirepipeError(f"{self.name}: the run is {'stopping' if self.running else 'not running'}"))
        elif self._switch is not None:
            future.set_exception(WirepipeError(f"{self.name}: another switch waits for the next batch boundary"))
        else:
            self._switch = (new, future)
            if self._queue is not None and self._queue.empty():  # the loop waits for a batch: wake it
                self._queue.put_nowait(_WAKE)
        return future

    async def _switch_now(self, sink: Sink, stats: RunStats) -> None:
        """The switch ``switch_to`` asked for: commit what the current config wrote, then adopt the new parts."""
        assert self._switch is not None
        new, done = self._switch
        self._switch = None
        await self._commit(sink, stats)
        try:
            await self._adopt(new, sink)
        except Exception as exc:  # a part that cannot open, whatever its error: the current config runs on
            if not done.done():
                done.set_exception(exc)
            return
        if not done.done():
            done.set_result(stats.batches)

    async def _adopt(self, new: Pipeline, sink: Sink) -> None:
        """Open ``new``'s parts beside the running source and sink (checked against them as at a start), go on with
        them and close the ones they replace; when one cannot open, the ones opened are closed and the error
        raised: nothing changed."""
        from ..metrics.recorder import pipeline_stages

        source = self.source
        check_parts(source, sink, new.dead_letter, new.operators)
        # the running stores (a changed `resources:` needs a restart): a store only the new operators name opens now
        self.resources.bind(new.operators, (source, sink))
        await self.resources.open()
        old_operators, old_dead_letter, old_metrics = self.operators, self.dead_letter, self.metrics
        fresh = [op for op in new.operators if not any(op is o for o in old_operators)]
        dead_letter = new.dead_letter if new.dead_letter is not old_dead_letter else None
        recorder = old_metrics if new.metrics_spec is self.metrics_spec else new._open_metrics()
        stages = pipeline_stages(source, new.operators, sink)
        opened: list[Any] = []
        try:
            if dead_letter is not None:
                dead_letter.bind(self.name, source)
                with _io_errors(f"dead_letter {dead_letter.name}", None):
                    await dead_letter.open()
                opened.append(dead_letter)
            for op in fresh:
                opened.append(op)
                await op.open((source, sink))
            if recorder is not None and recorder is not old_metrics:
                recorder.config_digest = new.config_digest
                with _io_errors("metrics", recorder.path):
                    recorder.open(stages)
        except BaseException:
            await self._close_each(opened)
            raise
        # From here nothing can fail: the new parts take over, then the ones they replace are closed.
        if recorder is old_metrics and recorder is not None:  # the rows so far keep the stages and config they ran
            recorder.restage(stages, new.config_digest)
        elif recorder is not old_metrics:
            if self._flusher is not None:
                self._flusher.cancel()
            self._flusher = asyncio.create_task(recorder.flush_periodically()) if recorder is not None else None
            if recorder is not None:
                recorder.mark_opened()
        self.metrics, self.metrics_spec = recorder, new.metrics_spec
        self.operators = list(new.operators)
        self._preparing = [op for op in self.operators if op.prepares]
        self._op_ns_per_record = None  # measured again: the new operators may cost more or less
        self.dead_letter = new.dead_letter
        self.flush_interval, self.shutdown_timeout = new.flush_interval, new.shutdown_timeout
        self.config, self.config_digest = new.config, new.config_digest
        left: list[Any] = [op for op in old_operators if not any(op is o for o in self.operators)]
        if dead_letter is not None and old_dead_letter is not None:
            left.append(old_dead_letter)
        self._opened = [*(p for p in self._opened if not any(p is q for q in left)), *opened]
        if old_metrics is not None and recorder is not old_metrics:
            await old_metrics.aclose()  # its rows are written (it waits for room on a full disk, as at the end)
        await self._close_each(left)

    async def _loop(self, source: Source, sink: Sink, stats: RunStats) -> None:
        queue: asyncio.Queue[tuple[Batch, int, int] | None] = asyncio.Queue(self.queue_size)
        self._queue = queue
        producer = asyncio.create_task(self._produce(source, queue))
        pressure = source.ack_pressure if isinstance(source, AtLeastOnce) else None
        interval = self.flush_interval
        ledger = self._ledger
        ledger.last = time.monotonic()
        try:
            while True:
                if self._switch is not None:  # a hot reload, between two batches
                    await self._switch_now(sink, stats)
                    interval = self.flush_interval
                if ledger.pending:
                    wait = ledger.last + interval - time.monotonic()
                    # Woken now and then: the source may ask for a commit while no batch comes. (Not wait_for:
                    # on Python 3.11 it swallows a cancellation, a Ctrl-C of ``run()``, that meets a ready item.)
                    getter = asyncio.ensure_future(queue.get())
                    try:
                        done, _ = await asyncio.wait({getter}, timeout=min(max(wait, 0.001), _COMMIT_POLL))
                    finally:
                        if not getter.done():
                            getter.cancel()  # a get cancelled leaves its item in the queue
                    if not done:
                        if ledger.due(interval, pressure):
                            await self._commit(sink, stats)
                        continue
                    item = getter.result()
                else:
                    item = await queue.get()
                if item is None:
                    break
                if item is _WAKE:
                    continue
                self._queued.pop(0)
                await self._process(*item, sink, stats)
                if ledger.due(interval, pressure):
                    await self._commit(sink, stats)
            await self._commit(sink, stats)  # the drain: what was written is flushed, then acked
        finally:
            self._queue = None
            if not producer.done():
                source.stopping.set()
                producer.cancel()
            while not producer.done():
                # Its last act is to put the end marker: on a full queue (the loop stopped taking, e.g. the
                # sink was down at a shutdown timeout) that would wait for ever. What is dropped here was
                # never acknowledged.
                while not queue.empty():
                    queue.get_nowait()
                await asyncio.wait({producer}, timeout=0.1)
            with contextlib.suppress(asyncio.CancelledError):
                await producer
            self._discard_unfinished(source, stats)

    def _discard_unfinished(self, source: Source, stats: RunStats) -> None:
        """Records read and never written (the run was cancelled): the source counts them (``Source.discard``)."""
        left = sum(len(b.values) + len(b.rejected) for b in self._queued)
        self._queued = []
        if self._in_flight is not None:
            n, rejected_before = self._in_flight
            unfinished = n - (stats.rejected - rejected_before)
            left += unfinished
            stats.records_in -= unfinished  # handed back to the source: redelivered, or counted lost there
            self._in_flight = None
        if left:
            log.warning("%s: stopped with %d record(s) read and not written%s", self.name, left,
                        "" if source.redelivers else " (the source cannot send them again: counted as discarded)")
            source.discard(left)

    async def _produce(self, source: Source, queue: asyncio.Queue[tuple[Batch, int, int] | None]) -> None:
        """Read batches into the queue, enforcing ``count`` even if the source overshoots.

        A redelivering source counts for itself: records it gets back (nak) do not count.
        """
        limit = source.count if not source.redelivers else None
        seen = 0
        it = source.batches().__aiter__()
        try:
            while source.drains or not source.stopping.is_set():  # a draining source ends on its own
                start = _ns()
                try:
                    batch = await it.__anext__()
                except StopAsyncIteration:
                    self.read_to_end = not source.stopping.is_set()
                    break
                end = _ns()
                if limit is not None and seen + len(batch.values) > limit:
                    batch.keep(list(range(limit - seen)))
                seen += len(batch.values) + len(batch.rejected)
                self._queued.append(batch)
                await queue.put((batch, start, end))
                if limit is not None and seen >= limit:
                    self.read_to_end = True
                    break
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()
            await queue.put(None)

    def process_batch(self, batch: Batch, index: int = 0, read: tuple[int, int] | None = None,
                      lost: int | None = None) -> Batch:
        """Run the operators over one batch: the one place they run (the run loop, the Beam DoFn, the bench,
        the capacity plan; the run loop's sliced and threaded forms run its loop, ``run_operators``).

        With a metrics recorder (``self.metrics``) the stages are stamped: a clock read when
        each operator starts and ends, its output sized in between, and the batch's rows
        handed over at once; ``index`` is the batch's number in the run, ``read`` when the
        source read it and ``lost`` what the source found lost before it. The records a stage
        rejects are in the returned ``rejected``.
        """
        if self.metrics is None and self.tracing is None:
            return run_operators(self.operators, batch)[0]
        raw_nbytes, redelivered = batch.raw_nbytes, batch.redelivered()
        batch, stamps = run_operators(self.operators, batch, timed=True)
        assert stamps is not None
        self._record(stamps, raw_nbytes, index, read, lost, redelivered, batch.rejected)
        return batch

    def _record(self, stamps: Stamps, raw_nbytes: int | None, index: int, read: tuple[int, int] | None,
                lost: int | None, redelivered: int | None, rejected: list[Rejected]) -> None:
        """Hand a timed pass's stage rows to the recorder (on the event loop, where its periodic flush runs)."""
        if self.metrics is not None:
            self.metrics.record_batch(index, read, stamps, raw_nbytes, lost, redelivered, rejected)
        if self.tracing is not None:
            self._stamps = stamps

    async def _process(self, batch: Batch, start: int, end: int, sink: Sink, stats: RunStats) -> None:
        between_batches()  # the allocator keeps what the last batch gave back, where it churns (core/allocator.py)
        metrics = self.metrics
        tracing = self.tracing
        index = stats.batches
        stats.batches += 1
        received = batch.values
        taken, taken_seqs = batch.meta.get("ack"), batch.meta.get("stream_seq")  # the source's ack handles
        stats.records_in += len(received) + len(batch.rejected)
        self._in_flight = (len(received) + len(batch.rejected), stats.rejected)
        if self._preparing:
            await self._prepare(batch, stats)
        if tracing is not None:
            traced = tracing.begin(batch, start, end)
        batch = await self._run_operators(index, batch, start, end)
        stats.projected += batch.projected
        settled_apart = [r.meta.get("ack") for r in batch.rejected] if taken else []
        if batch.rejected:
            await self._dead_letter(batch.rejected, stats)
            batch.rejected = []
        t0 = _ns()
        if tracing is not None:
            tracing.writing(traced, batch, t0)
        if len(received) == len(batch.values) and received is not batch.values:
            batch.meta[_RECEIVED] = received  # no copy: what a sink refuses is dead-lettered as received
        await self._retry.write(sink, batch, stats)
        self._in_flight = None  # written (or refused by the sink: dead-lettered next)
        t1 = _ns()
        batch.meta.pop(_RECEIVED, None)
        refused = batch.rejected
        if refused:  # the sink refused records (a value it cannot represent, larger than max_payload)
            for r in refused:
                original = r.meta.pop(_RECEIVED, None)
                if isinstance(original, (bytes, bytearray, memoryview)):
                    r.value = original
            await self._dead_letter(refused, stats)
            batch.rejected = []
            if taken:
                settled_apart += [r.meta.get("ack") for r in refused]
        stats.records_out += batch.record_count()
        stats.messages_out += len(batch.values)
        if metrics is not None:  # payload bytes are summed only when measuring: it is a pass over the column
            stats.bytes_out += metrics.stamp_sink(index, batch, t0, t1, refused) or 0
        if tracing is not None:
            tracing.end(traced, self._stamps, batch, t1, len(refused))
        self._ledger.wrote(batch)
        if taken:
            self._ledger.dropped(taken, taken_seqs, batch.meta.get("ack"), [h for h in settled_apart if h is not None])

    async def _prepare(self, batch: Batch, stats: RunStats) -> None:
        """The I/O operators need before their pass over ``batch`` (the dictionaries its frames name), on the
        event loop; an answer that does not come (``SinkUnavailable``) holds the batch and is retried, as a
        sink's write is: nothing is dead-lettered for an outage."""
        for op in self._preparing:
            while True:
                try:
                    await op.prepare(batch)
                except (ConfigError, asyncio.CancelledError):
                    raise
                except SinkUnavailable as exc:
                    await self._retry.down(op, exc, stats, [batch])
                    continue
                self._retry.up(op)
                break

    async def _run_operators(self, index: int, batch: Batch, start: int, end: int) -> Batch:
        """Run the operators over a batch; on a source with a socket to serve (core NATS, JetStream), a pass
        expected to take longer than ``_OFFLOAD_NS`` runs in slices or a thread so the event loop keeps
        reading (the GIL is handed back every few ms): a core NATS consumer that keeps up on average does not
        lose messages to bursts while a slow batch runs, and a JetStream worker receives its next batches
        while it decodes this one."""
        metrics = self.metrics
        ops = self.operators
        timed = metrics is not None or self.tracing is not None
        delta = None
        if metrics is not None and self.source.drops_when_unread:
            lost = self.source.lost
            delta, self._lost_seen = lost - self._lost_seen, lost
        offload = False
        if ops and self.source.reads_while_busy and batch.values:
            cost = self._op_ns_per_record
            offload = cost is None or cost * len(batch.values) > _OFFLOAD_NS
        t0 = _ns()
        if not timed and offload and _OFFLOAD_MODE != "thread" and all(op.per_record for op in ops):
            batch = await self._run_sliced(batch)
        elif offload:  # the pass in a thread; its rows recorded here, on the event loop (where the flush runs)
            raw_nbytes, redelivered = batch.raw_nbytes, batch.redelivered()
            batch, stamps = await asyncio.to_thread(run_operators, ops, batch, timed)
            if stamps is not None:
                self._record(stamps, raw_nbytes, index, (start, end), delta, redelivered, batch.rejected)
        else:
            batch = self.process_batch(batch, index, (start, end), delta)
        if self.source.reads_while_busy and batch.values is not None:
            n = len(batch.values) + len(batch.rejected)
            if n:
                self._op_ns_per_record = (_ns() - t0) / n
        return batch

    async def _run_sliced(self, batch: Batch) -> Batch:
        """``process_batch`` over slices of about ``_SLICE_NS`` of work (metrics off), yielding to the event
        loop between slices: nats-py's reader runs first at every yield, so reading keeps priority over
        operators."""
        n = len(batch.values)
        cost = self._op_ns_per_record
        size = max(1, int(_SLICE_NS // cost)) if cost else 16
        parts: list[Batch] = []
        i = 0
        while i < n:
            t0 = _ns()
            parts.append(self.process_batch(batch.slice(i, i + size)))
            i += size
            took = _ns() - t0
            size = max(1, int(_SLICE_NS * size // took)) if took > 0 else size * 2
            await self.source.let_read()
        out = Batch.join(parts) if parts else batch
        if batch.rejected and out is not batch:
            out.rejected[:0] = batch.rejected
        return out

    async def _commit(self, sink: Sink, stats: RunStats) -> None:
        """A commit (``commits.py``), then the ``after_commit`` hooks."""
        default = self.default_dead_letter
        assert default is not None, "a commit before the run started"
        if await self._ledger.commit(sink, self.dead_letter or default, self._retry, stats,
                                     lambda late: self._refused_late(late, stats), default):
            for hook in self.after_commit:
                hook()

    async def _refused_late(self, rejected: list[Rejected], stats: RunStats) -> None:
        """Records the sink refused after it took them (JetStream: at their ack): dead-lettered, with a sink row
        of no records that counts them by reason."""
        await self._dead_letter(rejected, stats)
        if self.metrics is not None:
            self.metrics.stamp_sink_refused(max(stats.batches - 1, 0), rejected)

    async def _dead_letter(self, rejected: list[Rejected], stats: RunStats) -> None:
        stats.rejected += len(rejected)
        for r in rejected:
            stats.rejected_by_stage[r.stage] = stats.rejected_by_stage.get(r.stage, 0) + 1
        stats.rejections.add(rejected)
        dead_letter = self.dead_letter or self.default_dead_letter
        if dead_letter is not None:
            if dead_letter is self.default_dead_letter and not getattr(dead_letter, "files", True):
                first = rejected[0]
                log.warning("records rejected (e.g. at %s (%s): %s); no dead_letter configured: they go to %s",
                            first.stage, first.operator, first.error, getattr(dead_letter, "path", dead_letter.name))
            fresh = self._not_come_back(rejected) if dead_letter.publishes_to is not None else rejected
            if fresh:
                await self._retry.retry(dead_letter, lambda: dead_letter.write_rejected(fresh), stats)
        self._ledger.rejected(rejected)

    def _not_come_back(self, rejected: list[Rejected]) -> list[Rejected]:
        """The rejected records that are not this pipeline's own dead letters come back through its source
        (a loop the configuration check could not see, e.g. through a relay): those are not dead-lettered
        again, the dead letter they were read from holds them."""
        pipeline, stage = Header.PIPELINE, Header.STAGE
        fresh = [r for r in rejected if not (r.headers and r.headers.get(pipeline) == self.name and stage in r.headers)]
        back = len(rejected) - len(fresh)
        if back:
            self._came_back += back
            if self._came_back <= 10 or self._came_back % 1000 == 0:
                log.warning("%d record(s) came back with this pipeline's own dead-letter headers (%d so far): not "
                            "dead-lettered again (a loop: the dead letter they were read from holds them)",
                            back, self._came_back)
        return fresh


def _open_tracing(pipeline: Pipeline) -> Any:
    """The run's tracer (``tracing.py``), or None when tracing is off."""
    from ..metrics.tracing import open_tracing

    return open_tracing(pipeline.tracing_spec, pipeline)


@contextlib.contextmanager
def _io_errors(what: str, path: Any) -> Any:
    """An output that cannot be opened (read-only, a file where a folder is expected) is one line:
    what, where, the OS error."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or path or "?"
        raise WirepipeError(f"{what}: cannot write to {where}: {exc.strerror or exc}") from None


Source.compose = Pipeline  # ``source | op | sink`` (connectors sit below this layer and cannot import it)
