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
from typing import Any

from ..errors import WirepipeError

log = logging.getLogger("wirepipe")


class ShutdownTimeout(WirepipeError):
    """The drain after a stop signal did not finish within ``shutdown_timeout``."""


async def run_worker_async(pipeline: Any, stop: asyncio.Event | None = None) -> Any:
    """Run ``pipeline`` until its source ends or a signal arrives, then drain within its deadline."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    signals = 0
    task = asyncio.ensure_future(pipeline.run_async(stop))
    deadline: asyncio.TimerHandle | None = None
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        timed_out = True
        log.error("drain did not finish within shutdown_timeout (%.0fs): stopping now; records not "
                  "acknowledged will be redelivered", pipeline.shutdown_timeout)
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
        return await task
    except asyncio.CancelledError:
        if timed_out:
            raise ShutdownTimeout(
                f"{pipeline.name}: the drain took longer than shutdown_timeout ({pipeline.shutdown_timeout:g}s)"
            ) from None
        if signals:
            raise KeyboardInterrupt from None
        raise
    finally:
        if deadline is not None:
            deadline.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_worker(pipeline: Any) -> Any:
    """``asyncio.run`` of ``run_worker_async``: the entry point of ``wirepipe run``."""
    return asyncio.run(run_worker_async(pipeline))
