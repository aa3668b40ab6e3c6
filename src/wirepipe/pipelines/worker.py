"""Running a pipeline as a long-lived worker: signals, the drain, and its deadline.

``run_worker(pipeline)`` is what ``wirepipe run`` calls. SIGINT or SIGTERM sets the
pipeline's stop event: the source stops fetching, the batches already read go through
the operators and the sink, the sink is flushed, what was written is acknowledged, and
files are closed (a Parquet file gets its footer). If that takes longer than the
pipeline's ``shutdown_timeout``, or a second signal arrives, the run is cut: parts are
still closed, records not yet acknowledged are redelivered later (a JetStream source is
at-least-once; nothing is acked that was not written), records a source cannot send again
are counted as discarded, and the stats say what the cut left (``RunStats.cut``).

Which stop is which, for the exit code (``core/exit_codes.py``): SIGTERM is the normal end of a
long-lived worker; SIGINT before the end of a bounded run (a count, a duration, ``stop_at_end``, a
file: ``Source.ends``) *interrupts* it (``RunStats.interrupted``: exit 130 after the drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING

from ..core.errors import WirepipeError

if TYPE_CHECKING:
    from .pipeline import Pipeline
    from .run import PipelineRun
    from .stats import RunStats

log = logging.getLogger("wirepipe")
_CLOSE_GRACE = 5.0  # seconds the cancelled run (and leftover tasks) get to close after shutdown_timeout


class ShutdownTimeout(WirepipeError):
    """The drain after a stop signal did not finish within ``shutdown_timeout``."""


async def run_worker_async(pipeline: Pipeline, stop: asyncio.Event | None = None, *,
                           ends: bool | None = None) -> RunStats:
    """Run ``pipeline`` until its source ends or a signal arrives, then drain within its deadline.

    ``ends``: the run has an end of its own, so a SIGINT before it interrupts the run (default: the source
    says, ``Source.ends``; ``tap --limit`` is a bound its sink keeps)."""
    from .service import with_service

    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    signals = 0
    run = pipeline.new_run()  # run.pipeline from here on: a hot reload replaces it (its shutdown_timeout too)
    task = asyncio.ensure_future(with_service(run, run.execute(stop)))  # a NATS service beside the run
    deadline: asyncio.TimerHandle | None = None
    # why the drain was cut, and what it left: records unconfirmed, records unacked, the sink's error if it still failed
    cut: tuple[str, int, int, str | None] | None = None
    interrupted = False
    bounded = pipeline.source.ends if ends is None else ends

    def cut_now(why: str) -> None:
        nonlocal cut
        sink = pipeline.sink
        unconfirmed = sink.unconfirmed if sink is not None else 0
        cut = (why, unconfirmed, run.unacked_records if pipeline.source.redelivers else 0, run.sink_error)
        task.cancel()

    def expire() -> None:
        timeout = run.pipeline.shutdown_timeout
        log.error("drain did not finish within shutdown_timeout (%.0fs): stopping now; %s", timeout,
                  "records not acknowledged will be redelivered"
                  if pipeline.source.redelivers else "records read and not written are counted as discarded")
        cut_now(f"the drain took longer than shutdown_timeout ({timeout:g}s)")

    def on_signal(signame: str) -> None:
        nonlocal signals, deadline, interrupted
        signals += 1
        if signals == 1:
            log.info("%s: draining (stop reading, finish in-flight batches, flush, ack; up to %.0fs)",
                     signame, run.pipeline.shutdown_timeout)
            # SIGINT before the end of a bounded run interrupts it; SIGTERM is a long-lived worker's normal end.
            interrupted = signame == "SIGINT" and bounded and not stop.is_set() and not run.read_to_end
            stop.set()
            deadline = loop.call_later(run.pipeline.shutdown_timeout, expire)
        elif cut is None:
            log.warning("%s again: stopping without finishing the drain", signame)
            interrupted = True
            cut_now(f"a second {signame}: stopped without finishing the drain")

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
    try:
        given_up_at = None
        while True:
            # After a cut the cancelled run gets a short grace to close its parts; a part that cannot close
            # (a hung server swallowing nats-py's close) must not keep the process alive.
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if done:
                break
            if cut is None:
                continue
            given_up_at = given_up_at or loop.time()
            if loop.time() - given_up_at < _CLOSE_GRACE:
                continue
            log.error("closing the pipeline's parts did not finish within %.0fs after the drain was cut: "
                      "leaving them", _CLOSE_GRACE)
            raise ShutdownTimeout(_timeout_message(run, cut[0]))
        if cut is None:
            stats = task.result()
        else:  # cancelled: its parts closed, its figures are complete (``PipelineRun.execute`` set them)
            with contextlib.suppress(asyncio.CancelledError):
                task.result()
            stats = run.stats
            why, unconfirmed, unacked, stats.sink_error = cut
            stats.cut = _timeout_message(run, why, unconfirmed, unacked, stats.sink_error)
            stats.unconfirmed = unconfirmed
            stats.outstanding = max(stats.outstanding, unacked)
        stats.interrupted = interrupted
        return stats
    finally:
        if deadline is not None:
            deadline.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)


def _timeout_message(run: PipelineRun, why: str, unconfirmed: int | None = None, unacked: int | None = None,
                     sink_error: str | None = None) -> str:
    """What a cut drain could not settle: for the run summary (given what was unsettled at the cut), or with the
    source's losses for the error that ends the process when the parts would not close (no summary then)."""
    pipeline = run.pipeline
    summary = unacked is not None
    if unacked is None:
        unacked = run.unacked_records
    if unconfirmed is None:
        unconfirmed = pipeline.sink.unconfirmed if pipeline.sink is not None else 0
    what = [f"the sink still failing ({sink_error})"] if sink_error else []
    if unconfirmed:
        what.append(f"{unconfirmed} record(s) published but unconfirmed by the server")
    if unacked and pipeline.source.redelivers:
        what.append(f"{unacked} record(s) not acknowledged to the source (it redelivers them)")
    elif unacked:
        what.append(f"{unacked} record(s) written but not flushed")
    losses = pipeline.source.losses()
    if summary:  # the summary line has the losses by kind
        if losses and losses.get("discarded"):
            what.append("records read and not written are counted as discarded (lost)")
    elif losses and (losses["lost"] or losses.get("unsure")):
        from .monitor import loss_summary

        what.append("core NATS: " + loss_summary(losses).lstrip(", "))
    unwritten = run.metrics.figures()["metrics_rows_unwritten"] if run.metrics is not None else 0
    if unwritten:
        what.append(f"{unwritten} metrics row(s) not written (the disk refused them)")
    left = "; ".join(what) or "nothing left unsettled"
    return f"{pipeline.name}: {why}: {left}"


def run_worker(pipeline: Pipeline, *, ends: bool | None = None) -> RunStats:
    """Run ``run_worker_async`` in a new event loop: the entry point of ``wirepipe run``.

    Unlike ``asyncio.run``, leftover tasks get a bounded wait after cancellation: a task stuck
    in a hung connection (the server SIGSTOPped) must not keep the process from exiting.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run_worker_async(pipeline, ends=ends))
    finally:
        tasks = asyncio.all_tasks(loop)
        for t in tasks:
            t.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=_CLOSE_GRACE))
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), _CLOSE_GRACE))
        asyncio.set_event_loop(None)
        loop.close()
