"""Running a pipeline as a long-lived worker: signals, the drain, and its deadline; a pool's worker process.

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

A worker process of a pool (``pool.py``, the supervisor, starts it: ``spawn.py``) runs ``run_pool_worker``: its
pipeline as ``wirepipe run`` runs it, its counters reported to the supervisor twice a second and after every
commit; it drains on its own when the supervisor is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from ..connectors.connector import AtLeastOnce, ConfirmsWrites, CountsLoss, Sink
from ..core.errors import WirepipeError
from ..core.exit_codes import ExitCode
from ..core.workers import Worker

if TYPE_CHECKING:
    from .pipeline import Pipeline
    from .run import PipelineRun
    from .spawn import Channel
    from .stats import RunStats

log = logging.getLogger("wirepipe")
pool_log = logging.getLogger("wirepipe.pool")  # a pool worker's own lines, as the pool's
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
    redelivers = isinstance(pipeline.source, AtLeastOnce)

    def cut_now(why: str) -> None:
        nonlocal cut
        cut = (why, _unconfirmed(pipeline.sink), run.unacked_records if redelivers else 0, run.sink_error)
        task.cancel()

    def expire() -> None:
        timeout = run.pipeline.shutdown_timeout
        log.error("drain did not finish within shutdown_timeout (%.0fs): stopping now; %s", timeout,
                  "records not acknowledged will be redelivered"
                  if redelivers else "records read and not written are counted as discarded")
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
            interrupted = interrupted or (signame == "SIGINT" and bounded)  # SIGTERM stays a worker's normal end
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


def _unconfirmed(sink: Sink | None) -> int:
    """Records the sink took that its destination has not confirmed yet (``ConfirmsWrites``)."""
    return sink.unconfirmed if isinstance(sink, ConfirmsWrites) else 0


def _timeout_message(run: PipelineRun, why: str, unconfirmed: int | None = None, unacked: int | None = None,
                     sink_error: str | None = None) -> str:
    """What a cut drain could not settle: for the run summary (given what was unsettled at the cut), or with the
    source's losses for the error that ends the process when the parts would not close (no summary then)."""
    pipeline = run.pipeline
    summary = unacked is not None
    if unacked is None:
        unacked = run.unacked_records
    if unconfirmed is None:
        unconfirmed = _unconfirmed(pipeline.sink)
    what = [f"the sink still failing ({sink_error})"] if sink_error else []
    if unconfirmed:
        what.append(f"{unconfirmed} record(s) published but unconfirmed by the server")
    if unacked and isinstance(pipeline.source, AtLeastOnce):
        what.append(f"{unacked} record(s) not acknowledged to the source (it redelivers them)")
    elif unacked:
        what.append(f"{unacked} record(s) written but not flushed")
    losses = pipeline.source.losses() if isinstance(pipeline.source, CountsLoss) else None
    if summary:  # the summary line has the losses by kind
        if losses and losses.get("discarded"):
            what.append("records read and not written are counted as discarded (lost)")
    elif losses and (losses["lost"] or losses.get("unsure") or losses.get("forgotten_running")):
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


# --- a pool's worker process ------------------------------------------------------------------------------

REPORT_INTERVAL = 0.5  # seconds between two reports of a pool's worker to its supervisor
OUTPUTS_EVERY = 10  # reports between two that say where the worker's output goes
WORKER_TARGET = f"{__name__}:run_pool_worker"  # what the spawner runs in each worker process


async def _run_reporting(pipeline: Pipeline, channel: Channel) -> RunStats:
    """Run the pipeline as ``wirepipe run`` does, reporting its snapshot to the supervisor twice a second.

    If the supervisor disappears (its pipe breaks, or this process is re-parented), the worker
    drains as on SIGTERM rather than run on unsupervised.
    """
    from .monitor import run_outputs, snapshot

    parent = os.getppid()

    def send(outputs: bool = False, commit: bool = False) -> bool:
        run = pipeline.last_run  # made by run_worker_async before this is first called
        assert run is not None
        message = {"snapshot": snapshot(run), "working": run.stats.working(), "cpu": time.process_time(),
                   "commit": commit}
        if outputs:
            message["outputs"] = run_outputs(run)
        return channel.send(message)

    async def reporter() -> None:
        reports = 0
        while True:
            await asyncio.sleep(REPORT_INTERVAL)
            reports += 1
            # Where the output goes, now and then (it looks at the files on disk), so a worker killed later
            # still shows in the pool's summary.
            if not send(outputs=reports % OUTPUTS_EVERY == 0) or os.getppid() != parent:
                pool_log.error("the pool supervisor is gone: draining")
                os.kill(os.getpid(), signal.SIGTERM)
                return

    task = asyncio.ensure_future(reporter())
    def report_commit() -> None:  # counted at once: a SIGKILL right after a commit loses none of it
        send(commit=True)

    pipeline.after_commit.append(report_commit)
    try:
        return await run_worker_async(pipeline)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        send(outputs=True)


def run_pool_worker(message: dict[str, Any], channel: Channel, reloads: Any = None) -> ExitCode:
    """One worker of a pool (started by ``spawn.start``): ``message`` is ``{"file", "config", "digest"}``, the
    pipeline file (what its errors name), the config this worker runs and its digest; ``reloads``, what takes the
    configs a watching supervisor sends (``reload.run_watched_worker``)."""
    from .config import build_pipeline, validate_config
    from .monitor import run_summary

    file = message.get("file") or f"worker {Worker.current().index}"
    pipe = build_pipeline(validate_config(message["config"], file=file), file=file)
    pipe.config_digest = message.get("digest")
    pipe.reloader = reloads
    stats = asyncio.run(_run_reporting(pipe, channel))
    assert pipe.last_run is not None
    pool_log.info("%s", run_summary(pipe.last_run, stats))
    # Its counts reached the supervisor, which decides the pool's exit code from them all; a failure of its own
    # (publishes left unconfirmed by a cut drain) is the worker's.
    return ExitCode.RUNTIME if stats.outcome().failures else ExitCode.OK
