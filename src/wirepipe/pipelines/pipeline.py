"""A pipeline: a source, CPU operators and a sink, put together and checked; ``run.py`` runs it.

``Pipeline`` is what a user builds and composes (directly, with ``source | op | sink``, or from YAML by
``config.py``): its parts, the dead-letter destination, metrics, tracing, the stores its operators read
(``resources.py``) and the settings of its runs. It is checked when it is built (``checks.py``: what the parts
take from each other and refuse of each other) and is not changed by running it: ``Pipeline.run()`` hands it to
one run (``run.py``: the loop, its queue, the ack ledger, retries, the metrics and tracing around batches; a hot
reload switches that run to another pipeline between two batches) and returns what the run did (``stats.py``).

The operators run in one place, ``Pipeline.process_batch``, over one loop, ``run_operators``: the run loop (on
the event loop, in slices, in a thread), the Beam DoFn, the bench and the capacity plan all call it, so an
operator behaves, rejects and is stamped alike wherever it runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..connectors.connector import Sink, Source
from ..core.batch import Batch, Rejected, payload_nbytes
from ..operators.operator import Operator, Operators, flatten
from .checks import check_parts
from .stats import RunStats

if TYPE_CHECKING:
    from ..metrics.recorder import Stamps
    from .run import PipelineRun

_ns = time.monotonic_ns


class BatchRecorder(Protocol):
    """What takes a timed pass's stage rows (``Pipeline.process_batch``): a ``MetricsRecorder``, or a run, which
    hands them to its recorder and its tracer."""

    def record_batch(self, index: int, read: tuple[int, int] | None, stamps: Stamps, raw_nbytes: int | None,
                     lost: int | None, redelivered: int | None, rejected: list[Rejected]) -> None: ...


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

    ``run()`` and ``run_async()`` run it (each call a new run, ``last_run``) and return what the run did; while
    it runs, ``stats`` and ``running`` show it.
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
        # names the default dead-letter file apart (a replay's: ``out.replay.dead.jsonl``)
        self.dead_letter_role: str | None = None
        self.queue_size = queue_size
        self.shutdown_timeout = shutdown_timeout
        self.flush_interval = flush_interval
        self.config = config
        self.monitor = monitor
        # OpenTelemetry (tracing.py): None decides by the OTEL_* variables; False, True, a TracingConfig or a
        # tracer provider.
        self.tracing_spec = tracing
        # Called after every commit (a pool worker reports its counters then: what it committed is counted even
        # if it is killed right after)
        self.after_commit: list[Callable[[], None]] = []
        # A hot reload (``reload.py``): ``reloader.watch(run)`` runs beside the loop while a run lasts and asks it
        # to switch to another config's operators (``PipelineRun.switch_to``); ``config_digest`` names the config
        # the batches run under (the metrics' ``config_digest`` column).
        self.reloader: Any = None
        self.config_digest: str | None = None
        self.last_run: PipelineRun | None = None  # the run in progress, or the last one

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
        return self._with(operators, sink)

    def reloaded(self, new: Pipeline) -> Pipeline:
        """This pipeline with ``new``'s operators, dead letter, metrics, ``flush_interval``, ``shutdown_timeout``,
        config and digest: what a hot reload changes in place (``config_versions.IN_PLACE``;
        ``PipelineRun.switch_to`` goes on with it). The rest is this one's, ``new``'s source and sink are not used;
        checked as any pipeline is when it is built."""
        reloaded = self._with(new.operators, self.sink, metrics=new.metrics_spec, dead_letter=new.dead_letter,
                              shutdown_timeout=new.shutdown_timeout, flush_interval=new.flush_interval,
                              config=new.config)
        reloaded.config_digest = new.config_digest
        reloaded.dead_letter_role, reloaded.reloader = self.dead_letter_role, self.reloader
        reloaded.after_commit = self.after_commit
        return reloaded

    def _with(self, operators: Operators, sink: Sink | None, **changed: Any) -> Pipeline:
        """A new pipeline of this one's source, ``operators`` and ``sink``, with this one's settings but ``changed``
        (the constructor's keyword arguments)."""
        settings = {"name": self.name, "metrics": self.metrics_spec, "dead_letter": self.dead_letter,
                    "queue_size": self.queue_size, "shutdown_timeout": self.shutdown_timeout,
                    "flush_interval": self.flush_interval, "config": self.config, "monitor": self.monitor,
                    "tracing": self.tracing_spec, "resources": self.resources}
        return type(self)(self.source, operators, sink, **{**settings, **changed})

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
        return await self.new_run().execute(stop)

    def new_run(self) -> PipelineRun:
        """A run of this pipeline (``run.py``: the state of the loop from its start to its end), ``last_run`` from
        now on; ``execute()`` runs it."""
        from .run import PipelineRun

        self.last_run = PipelineRun(self)
        return self.last_run

    @property
    def stats(self) -> RunStats:
        """What the run in progress (or the last one) did so far."""
        return self.last_run.stats if self.last_run is not None else RunStats()

    @property
    def running(self) -> bool:
        """True while a run has every part open and reads."""
        return self.last_run is not None and self.last_run.running

    def process_batch(self, batch: Batch, index: int = 0, read: tuple[int, int] | None = None,
                      lost: int | None = None, recorder: BatchRecorder | None = None) -> Batch:
        """Run the operators over one batch: the one place they run (the run loop, the Beam DoFn, the bench,
        the capacity plan; the run loop's sliced and threaded forms too).

        With a ``recorder`` (a ``MetricsRecorder``; a run with metrics or tracing on) the stages are stamped: a
        clock read when each operator starts and ends, its output sized in between, and the batch's rows
        handed over at once; ``index`` is the batch's number in the run, ``read`` when the
        source read it and ``lost`` what the source found lost before it. The records a stage
        rejects are in the returned ``rejected``.
        """
        if recorder is None:
            return run_operators(self.operators, batch)[0]
        raw_nbytes, redelivered = batch.raw_nbytes, batch.redelivered()
        batch, stamps = run_operators(self.operators, batch, timed=True)
        assert stamps is not None
        recorder.record_batch(index, read, stamps, raw_nbytes, lost, redelivered, batch.rejected)
        return batch


Source.compose = Pipeline  # ``source | op | sink`` (connectors sit below this layer and cannot import it)
