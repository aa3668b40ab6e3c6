"""One run of a pipeline: the run loop and its state, from the start of the run to its end.

``Pipeline.run()`` makes a ``PipelineRun`` (``Pipeline.new_run``) and executes it. The run loop reads batches
from the source into a bounded queue (a slow sink slows the source down, memory stays flat), runs every
operator over each batch (``Pipeline.process_batch``), routes rejected records to the dead-letter destination
and writes the batch to the sink. With metrics on, each stage of each batch is stamped; with tracing on, each
batch is a span. A pipeline that names no dead-letter destination writes its rejected records to a JSONL file
beside its output (``dead_letters.py``): none is thrown away, and the run's ``RunStats.rejections`` count them by
stage, operator and reason. A record that comes back with the pipeline's own dead-letter headers (a loop the
checks could not see) is not dead-lettered again.

Acknowledgement (at-least-once sources such as JetStream): a record is acknowledged
only once the sink has made it durable: the loop notes what it wrote in the ack ledger and
*commits* every ``flush_interval`` (``commits.py``: flush, then ack and settle).

A failed write or flush is the sink's condition, never the records' (``connectors/connector.py``):
the loop holds every record it has (in the sink, in the queue), keeps a redelivering source
from sending them again (``in_progress``; nothing is ``nak``-ed), waits and retries the same
write or flush for as long as it takes (``sink_retry.py``). Only records a stage or the sink
refuses for their own sake (a value it cannot represent) go to the dead-letter destination.

A hot reload switches the run to another pipeline (``Pipeline.reloaded``: the same source and sink, a new
config's operators, dead letter and metrics) between two batches (``switch_to``, ``switch.py``).

A stop past ``shutdown_timeout`` cancels the run: what the loop had read and not written (in
its queue, in the operators, in the sink's write) is handed to ``CountsLoss.discard``, so a source
that cannot redeliver (core NATS) counts it lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from ..connectors.connector import (
    AtLeastOnce,
    Commits,
    ConfirmsWrites,
    CountsLoss,
    Drains,
    PublishesToSubjects,
    ReadsFiles,
    ReadsWhileBusy,
    Sink,
    Source,
)
from ..core import collector
from ..core.allocator import between_batches
from ..core.batch import Batch, Rejected
from ..core.errors import ConfigError, SinkUnavailable, WirepipeError
from ..operators.operator import Operator
from ..wire import Header
from .checks import check_parts
from .commits import AckLedger, commit_interval
from .parts import close_each, new_recorder, open_parts, open_recorder
from .sink_retry import SinkRetry
from .stats import LossSince, RunStats
from .switch import Takeover, open_beside

if TYPE_CHECKING:
    from ..metrics.recorder import Stamps
    from .pipeline import Pipeline

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


class PipelineRun:
    """One run of ``pipeline`` (see the module doc): ``execute()`` runs it, once. While it runs, the status line,
    the drain of a worker, its NATS service and a hot reload read it: ``stats``, ``running``, ``sink_error``,
    ``unacked_records``, ``metrics``; ``pipeline`` is the pipeline it runs now (a hot reload replaces it)."""

    def __init__(self, pipeline: Pipeline) -> None:
        source = pipeline.source
        self.pipeline = pipeline
        self.stats = RunStats()
        self.running = False
        # the source ended on its own (its input, its count): a stop after it interrupts nothing
        self.read_to_end = False
        self.metrics: Any = None  # the metrics recorder, None without metrics
        # OpenTelemetry (tracing.py): the run's tracer, None when off (the hooks below test only that)
        self.tracing: Any = None
        self._stamps: Stamps | None = None  # the last timed pass's stamps, for the tracer
        # where rejects go without a ``dead_letter``, and what a dead_letter refuses (dead_letters.py): set at start
        self.default_dead_letter: Sink | None = None
        self.monitor: Any = None  # the Monitor of this run (its Prometheus port, for tests)
        # What the source declares, asked once (a hot reload keeps the source): the loop reads these per batch.
        self._lossy = source if isinstance(source, CountsLoss) else None  # its losses stamped on every batch
        self._busy = source if isinstance(source, ReadsWhileBusy) else None  # long passes run off the event loop
        self._ledger = AckLedger(source)  # written and not committed; dead-lettered and not settled
        self._queued: list[Batch] = []  # read, waiting in the queue (kept alive while the sink is down)
        self._retry = SinkRetry(source, self._held)
        self._op_ns_per_record: float | None = None  # the operators' measured cost a value given, to offload
        self._loss_rows = LossSince(source) if isinstance(source, CountsLoss) else None  # on each source row
        self._tail_delta: int | None = None  # of the batch being processed: the change in what stamps alone claim
        # The batch between the queue and the sink: (records read, stats.rejected when it started).
        self._in_flight: tuple[int, int] | None = None
        self._came_back = 0  # records with this pipeline's own dead-letter headers, not dead-lettered again
        self._preparing: list[Operator] = []  # operators whose prepare(batch) the loop awaits before a pass
        # A switch to another pipeline's parts asked for (``switch_to``), done between two batches
        self._switch: tuple[Pipeline, asyncio.Future[int]] | None = None
        self._queue: asyncio.Queue[Any] | None = None  # the loop's queue while it runs
        self._opened: list[Any] = []  # the parts open, closed last first at the end (a switch changes them)
        self._flusher: asyncio.Task[None] | None = None  # the metrics' periodic flush

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

    async def execute(self, stop: asyncio.Event | None = None) -> RunStats:
        """Run to the end of the source, or until ``stop`` is set (a drain: what was read is written and
        committed); returns the run's stats."""
        from ..connectors.null import NullSink

        pipeline = self.pipeline
        source = pipeline.source
        sink = pipeline.sink if pipeline.sink is not None else NullSink()
        check_parts(source, sink, pipeline.dead_letter, pipeline.operators)  # its attributes may have changed since
        pipeline.resources.bind(pipeline.operators, (source, sink))  # put together with |, it has its sink only now
        self._preparing = [op for op in pipeline.operators if op.prepares]
        if stop is not None:
            source.stopping = stop
        self.stats = stats = RunStats()  # its clock starts now
        from .dead_letters import DefaultDeadLetter, default_path

        # Without a dead_letter, where rejects go; with one, where what it refuses for itself goes.
        self.default_dead_letter = DefaultDeadLetter(default_path(pipeline.name, pipeline.sink, pipeline.metrics_spec,
                                                                  pipeline.dead_letter_role))
        self.metrics = new_recorder(pipeline)
        from ..metrics.tracing import open_tracing  # None when tracing is off

        self.tracing = open_tracing(pipeline.tracing_spec, pipeline)
        timer = watching = None
        if self.metrics is not None:
            from ..metrics.recorder import pipeline_stages

            open_recorder(self.metrics, pipeline_stages(source, pipeline.operators, sink), pipeline.config_digest)
            self._flusher = asyncio.create_task(self.metrics.flush_periodically())
        cancelled = cancelled_late = False
        for part in (sink, pipeline.dead_letter):
            if part is not None:
                part.bind(pipeline.name, source)  # e.g. the JetStream sink's default Nats-Msg-Id names both
        monitor = None
        if pipeline.monitor is not None:
            from .monitor import Monitor

            monitor = self.monitor = Monitor(self, pipeline.monitor)
            await monitor.start()
        try:
            collector.run_started()  # the garbage collector for batches (core/collector.py)
            await open_parts(pipeline, source, sink, self._opened)
            if source.duration:
                timer = asyncio.get_running_loop().call_later(source.duration, source.stopping.set)
            self.running = True
            stats.opened = time.monotonic() - stats.started
            if self.metrics is not None:
                self.metrics.mark_opened()
            if pipeline.reloader is not None:
                watching = asyncio.create_task(pipeline.reloader.watch(self))
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
            self._opened.insert(1, self.default_dead_letter)  # opened at its first record, closed after the sink
            await close_each(self._opened)
            if self._flusher is not None:
                self._flusher.cancel()
            if self.metrics is not None and self._loss_rows is not None:
                found_late, tail_late = self._loss_rows.take()  # discarded at the drain, a tail: on its rows too
                if found_late or tail_late:
                    self.metrics.stamp_source_lost(stats.batches, found_late, tail_late)
            if self.metrics is not None:
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
            stats.losses = self._lossy.losses() if self._lossy is not None else None
            if isinstance(source, AtLeastOnce):
                stats.redelivered, stats.outstanding = source.redelivered, source.outstanding
            stats.deduplicated = sink.deduplicated if isinstance(sink, ConfirmsWrites) else 0
            stats.unreadable = source.unreadable() if isinstance(source, ReadsFiles) else []
        if cancelled_late:
            raise asyncio.CancelledError
        return stats

    # --- a hot reload ------------------------------------------------------------------------------

    def switch_to(self, new: Pipeline) -> asyncio.Future[int]:
        """Go on with ``new``'s operators, dead letter, metrics, ``flush_interval``, ``shutdown_timeout`` and config
        (``Pipeline.reloaded``) from the next batch boundary, once what the running config wrote is committed
        (flushed, then acknowledged): a hot reload (``reload.py``). ``new`` itself never runs: its source, sink,
        name, queue, monitor and tracing are not used (changing those needs a restart: ``reload.py`` refuses it
        before asking). Parts that ``new`` shares with the running pipeline (the same objects) stay open as they
        are. The future's result is the index of the first batch that ``new``'s parts run; its error, what kept
        the running ones (a part that cannot open: ``switch.py``)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        name = self.pipeline.name
        if not self.running or self.pipeline.source.stopping.is_set():
            future.set_exception(WirepipeError(f"{name}: the run is {'stopping' if self.running else 'not running'}"))
        elif self._switch is not None:
            future.set_exception(WirepipeError(f"{name}: another switch waits for the next batch boundary"))
        else:
            self._switch = (new, future)
            if self._queue is not None and self._queue.empty():  # the loop waits for a batch: wake it
                self._queue.put_nowait(_WAKE)
        return future

    async def _switch_now(self, sink: Sink, stats: RunStats) -> None:
        """The switch ``switch_to`` asked for: commit what the running config wrote, then take the new parts over."""
        assert self._switch is not None
        new, done = self._switch
        self._switch = None
        await self._commit(sink, stats)
        try:
            await self._take_over(await open_beside(self.pipeline, new, sink, self.metrics))
        except Exception as exc:  # a part that cannot open, whatever its error: the running config goes on
            if not done.done():
                done.set_exception(exc)
            return
        if not done.done():
            done.set_result(stats.batches)

    async def _take_over(self, takeover: Takeover) -> None:
        """Go on with the parts ``open_beside`` opened, then close the ones they replace: nothing here can fail."""
        recorder, old_metrics = takeover.recorder, self.metrics
        if recorder is old_metrics and recorder is not None:  # the rows so far keep the stages and config they ran
            recorder.restage(takeover.stages, takeover.pipeline.config_digest)
        elif recorder is not old_metrics:
            if self._flusher is not None:
                self._flusher.cancel()
            self._flusher = asyncio.create_task(recorder.flush_periodically()) if recorder is not None else None
            if recorder is not None:
                recorder.mark_opened()
        self.metrics = recorder
        self.pipeline = takeover.pipeline
        self._preparing = [op for op in takeover.pipeline.operators if op.prepares]
        self._op_ns_per_record = None  # measured again: the new operators may cost more or less
        replaced = takeover.replaces
        self._opened = [*(p for p in self._opened if not any(p is q for q in replaced)), *takeover.opened]
        if old_metrics is not None and recorder is not old_metrics:
            await old_metrics.aclose()  # its rows are written (it waits for room on a full disk, as at the end)
        await close_each(replaced)

    # --- the loop ------------------------------------------------------------------------------------

    async def _loop(self, source: Source, sink: Sink, stats: RunStats) -> None:
        queue: asyncio.Queue[tuple[Batch, int, int] | None] = asyncio.Queue(self.pipeline.queue_size)
        self._queue = queue
        producer = asyncio.create_task(self._produce(source, queue))
        pressure = source.ack_pressure if isinstance(source, Commits) else None
        interval = commit_interval(self.pipeline.flush_interval, source)
        ledger = self._ledger
        ledger.last = time.monotonic()
        reads_while_busy = self._busy is not None
        try:
            while True:
                if self._switch is not None:  # a hot reload, between two batches
                    await self._switch_now(sink, stats)
                    interval = commit_interval(self.pipeline.flush_interval, source)
                if queue.empty():  # a producer ready to run (woken by the last take) fills it first
                    await asyncio.sleep(0)
                if not queue.empty():  # a batch waits: taken without a task and a timer per batch
                    item = queue.get_nowait()
                    if reads_while_busy:  # its client reads the socket between two batches, as it would waiting
                        await asyncio.sleep(0)
                elif ledger.pending:
                    wait = ledger.last + interval - time.monotonic()
                    # Woken now and then: the source may ask for a commit while no batch comes (not wait_for: on
                    # 3.11 it swallows a cancellation, a Ctrl-C of ``run()``, that meets a ready item).
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
                if self.metrics is not None and self.metrics.rows_held > self.metrics.max_rows_held:
                    await self._commit(sink, stats)  # what was written is settled before the wait
                    await self.metrics.room(source.stopping)
            await self._commit(sink, stats)  # the drain: what was written is flushed, then acked
        finally:
            self._queue = None
            if not producer.done():
                source.stopping.set()
                producer.cancel()
            while not producer.done():
                # Its last act, the end marker, would wait for ever on a full queue (the loop stopped taking:
                # a sink down at a shutdown timeout). What is dropped here was never acknowledged.
                while not queue.empty():
                    queue.get_nowait()
                await asyncio.wait({producer}, timeout=0.1)
            with contextlib.suppress(asyncio.CancelledError):
                await producer
            self._discard_unfinished(source, stats)

    def _discard_unfinished(self, source: Source, stats: RunStats) -> None:
        """Records read and never written (the run was cancelled): a lossy source counts them (``CountsLoss``)."""
        left = sum(len(b.values) + len(b.rejected) for b in self._queued)
        self._queued = []
        if self._in_flight is not None:
            n, rejected_before = self._in_flight
            unfinished = n - (stats.rejected - rejected_before)
            left += unfinished
            stats.records_in -= unfinished  # handed back to the source: redelivered, or counted lost there
            self._in_flight = None
        if left:
            log.warning("%s: stopped with %d record(s) read and not written%s", self.pipeline.name, left,
                        "" if isinstance(source, AtLeastOnce) else
                        " (the source cannot send them again: counted as discarded)")
            if self._lossy is not None:
                self._lossy.discard(left)

    async def _produce(self, source: Source, queue: asyncio.Queue[tuple[Batch, int, int] | None]) -> None:
        """Read batches into the queue, enforcing ``count`` even if the source overshoots.

        A redelivering source counts for itself: records it gets back (nak) do not count.
        """
        limit = source.count if not isinstance(source, AtLeastOnce) else None
        drains = isinstance(source, Drains)
        seen = 0
        it = source.batches().__aiter__()
        try:
            while drains or not source.stopping.is_set():  # a draining source ends on its own
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

    # --- one batch -----------------------------------------------------------------------------------

    def record_batch(self, index: int, read: tuple[int, int] | None, stamps: Stamps, raw_nbytes: int | None,
                     lost: int | None, redelivered: int | None, rejected: list[Rejected]) -> None:
        """A timed pass's stage rows (``Pipeline.process_batch``), handed to the recorder on the event loop, where
        its periodic flush runs; its stamps kept for the tracer."""
        if self.metrics is not None:
            tail, self._tail_delta = self._tail_delta, None
            self.metrics.record_batch(index, read, stamps, raw_nbytes, lost, redelivered, rejected, tail)
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
        collector.batch_written(len(batch.values))  # young collections a few batches apart (core/collector.py)
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
        pipeline = self.pipeline
        metrics = self.metrics
        ops = pipeline.operators
        timed = metrics is not None or self.tracing is not None
        delta = None
        if metrics is not None and self._loss_rows is not None:
            delta, self._tail_delta = self._loss_rows.take()
        offload = False
        busy = self._busy is not None
        given = len(batch.values)  # the cost is per value as the source gave it: unpack turns one into many
        if ops and busy and given:
            cost = self._op_ns_per_record
            offload = cost is None or cost * given > _OFFLOAD_NS
        t0 = _ns()
        if not timed and offload and _OFFLOAD_MODE != "thread" and all(op.per_record for op in ops):
            batch = await self._run_sliced(batch)
        elif offload:  # the pass in a thread; its rows recorded here, on the event loop (where the flush runs)
            stamped = _Stamped() if timed else None
            batch = await asyncio.to_thread(pipeline.process_batch, batch, index, (start, end), delta, stamped)
            if stamped is not None:
                self.record_batch(*stamped.rows)
        else:
            batch = pipeline.process_batch(batch, index, (start, end), delta, self if timed else None)
        if busy and given:
            self._op_ns_per_record = (_ns() - t0) / given
        return batch

    async def _run_sliced(self, batch: Batch) -> Batch:
        """``process_batch`` over slices of about ``_SLICE_NS`` of work (metrics off), yielding to the event
        loop between slices: nats-py's reader runs first at every yield, so reading keeps priority over
        operators."""
        pipeline, busy = self.pipeline, self._busy
        assert busy is not None, "only a source that reads while busy has its passes sliced"
        n = len(batch.values)
        cost = self._op_ns_per_record
        size = max(1, int(_SLICE_NS // cost)) if cost else 16
        parts: list[Batch] = []
        i = 0
        while i < n:
            t0 = _ns()
            parts.append(pipeline.process_batch(batch.slice(i, i + size)))
            i += size
            took = _ns() - t0
            size = max(1, int(_SLICE_NS * size // took)) if took > 0 else size * 2
            await busy.let_read()
        out = Batch.join(parts) if parts else batch
        if batch.rejected and out is not batch:
            out.rejected[:0] = batch.rejected
        return out

    # --- commits and dead letters --------------------------------------------------------------------

    async def _commit(self, sink: Sink, stats: RunStats) -> None:
        """A commit (``commits.py``), then the ``after_commit`` hooks."""
        default = self.default_dead_letter
        assert default is not None, "a commit before the run started"
        pipeline = self.pipeline
        if await self._ledger.commit(sink, pipeline.dead_letter or default, self._retry, stats,
                                     lambda late: self._refused_late(late, stats), default):
            for hook in pipeline.after_commit:
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
        dead_letter = self.pipeline.dead_letter or self.default_dead_letter
        if dead_letter is not None:
            if dead_letter is self.default_dead_letter and not getattr(dead_letter, "files", True):
                first = rejected[0]
                log.warning("records rejected (e.g. at %s (%s): %s); no dead_letter configured: they go to %s",
                            first.stage, first.operator, first.error, getattr(dead_letter, "path", dead_letter.name))
            fresh = self._not_come_back(rejected) if isinstance(dead_letter, PublishesToSubjects) else rejected
            if fresh:
                await self._retry.retry(dead_letter, lambda: dead_letter.write_rejected(fresh), stats)
        self._ledger.rejected(rejected)

    def _not_come_back(self, rejected: list[Rejected]) -> list[Rejected]:
        """The rejected records that are not this pipeline's own dead letters come back through its source
        (a loop the configuration check could not see, e.g. through a relay): those are not dead-lettered
        again, the dead letter they were read from holds them."""
        pipeline, stage = Header.PIPELINE, Header.STAGE
        name = self.pipeline.name
        fresh = [r for r in rejected if not (r.headers and r.headers.get(pipeline) == name and stage in r.headers)]
        back = len(rejected) - len(fresh)
        if back:
            self._came_back += back
            if self._came_back <= 10 or self._came_back % 1000 == 0:
                log.warning("%d record(s) came back with this pipeline's own dead-letter headers (%d so far): not "
                            "dead-lettered again (a loop: the dead letter they were read from holds them)",
                            back, self._came_back)
        return fresh


class _Stamped:
    """A threaded pass's stage rows, kept for the event loop (``PipelineRun.record_batch`` there)."""

    rows: tuple[Any, ...] = ()

    def record_batch(self, index: int, read: tuple[int, int] | None, stamps: Stamps, raw_nbytes: int | None,
                     lost: int | None, redelivered: int | None, rejected: list[Rejected]) -> None:
        self.rows = (index, read, stamps, raw_nbytes, lost, redelivered, rejected)
