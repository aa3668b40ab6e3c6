"""Running a pipeline as a long-lived worker: signals, the drain, and its deadline.

``run_worker(pipeline)`` is what ``wirepipe run`` calls. SIGINT or SIGTERM sets the
pipeline's stop event: the source stops fetching, the batches already read go through
the operators and the sink, the sink is flushed, what was written is acknowledged, and
files are closed (a Parquet file gets its footer). If that takes longer than the
pipeline's ``shutdown_timeout``, or a second signal arrives, the run is cancelled:
parts are still closed, and records not yet acknowledged are redelivered later (a
JetStream source is at-least-once; nothing is acked that was not written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING

from ..core.errors import WirepipeError

if TYPE_CHECKING:
    from .pipeline import Pipeline, RunStats

log = logging.getLogger("wirepipe")
_CLOSE_GRACE = 5.0  # seconds the cancelled run (and leftover tasks) get to close after shutdown_timeout


class ShutdownTimeout(WirepipeError):
    """The drain after a stop signal did not finish within ``shutdown_timeout``."""


async def run_worker_async(pipeline: Pipeline, stop: asyncio.Event | None = None) -> RunStats:
    """Run ``pipeline`` until its source ends or a signal arrives, then drain within its deadline."""
    from .service import with_service

    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    signals = 0
    task = asyncio.ensure_future(with_service(pipeline, pipeline.run_async(stop)))  # a NATS service beside the run
    deadline: asyncio.TimerHandle | None = None
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        timed_out = True
        log.error("drain did not finish within shutdown_timeout (%.0fs): stopping now; %s",
                  pipeline.shutdown_timeout, "records not acknowledged will be redelivered"
                  if pipeline.source.redelivers else "records read and not written are counted as discarded")
        task.cancel()

    def on_signal(signame: str) -> None:
        nonlocal signals, deadline
        signals += 1
        if signals == 1:
            log.info("%s: draining (stop reading, finish in-flight batches, flush, ack; up to %.0fs)",
                     signame, pipeline.shutdown_timeout)
            stop.set()
            deadline = loop.call_later(pipeline.shutdown_timeout, expire)
        else:
            log.warning("%s again: stopping without finishing the drain", signame)
            task.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig.name)
            installed.append(sig)
    try:
        given_up_at = None
        while True:
            # After the deadline the cancelled run gets a short grace to close its parts; a part that
            # cannot close (a hung server swallowing nats-py's close) must not keep the process alive.
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if done:
                break
            if not timed_out:
                continue
            given_up_at = given_up_at or loop.time()
            if loop.time() - given_up_at < _CLOSE_GRACE:
                continue
            log.error("closing the pipeline's parts did not finish within %.0fs after shutdown_timeout: "
                      "leaving them", _CLOSE_GRACE)
            raise ShutdownTimeout(_timeout_message(pipeline))
        return task.result()
    except asyncio.CancelledError:
        if timed_out:
            raise ShutdownTimeout(_timeout_message(pipeline)) from None
        if signals:
            raise KeyboardInterrupt from None
        raise
    finally:
        if deadline is not None:
            deadline.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)


def _timeout_message(pipeline: Pipeline) -> str:
    """What the drain could not settle, for the error that ends the process."""
    unacked = pipeline.unacked_records
    unconfirmed = pipeline.sink.unconfirmed if pipeline.sink is not None else 0
    what = []
    if unconfirmed:
        what.append(f"{unconfirmed} record(s) published but unconfirmed by the server")
    if unacked and pipeline.source.redelivers:
        what.append(f"{unacked} record(s) not acknowledged to the source (it redelivers them)")
    elif unacked:
        what.append(f"{unacked} record(s) written but not flushed")
    losses = pipeline.source.losses()
    if losses and (losses["lost"] or losses.get("unsure")):
        from .monitor import loss_summary

        what.append("core NATS: " + loss_summary(losses).lstrip(", "))
    unwritten = pipeline.metrics.figures()["metrics_rows_unwritten"] if pipeline.metrics is not None else 0
    if unwritten:
        what.append(f"{unwritten} metrics row(s) not written (the disk refused them)")
    left = "; ".join(what) or "nothing known unsettled"
    return (f"{pipeline.name}: the drain took longer than shutdown_timeout ({pipeline.shutdown_timeout:g}s): "
            f"{left}")


def run_worker(pipeline: Pipeline) -> RunStats:
    """Run ``run_worker_async`` in a new event loop: the entry point of ``wirepipe run``.

    Unlike ``asyncio.run``, leftover tasks get a bounded wait after cancellation: a task stuck
    in a hung connection (the server SIGSTOPped) must not keep the process from exiting.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run_worker_async(pipeline))
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
