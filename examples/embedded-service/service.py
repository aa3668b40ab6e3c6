"""An asyncio service that runs a wirepipe pipeline next to its own work, and stops both gracefully.

The pipeline is built with wirepipe's Python API (the same checks as YAML), its `map` step is a function of
the service's, and it runs in the service's event loop with `Pipeline.run_async(stop)`: setting `stop` makes
it stop reading, finish the batches in flight, flush the sink, acknowledge what was written and close.
SIGTERM or Ctrl-C sets it; the service's own task stops on the same event.

    NATS_URL=nats://127.0.0.1:4222 python service.py
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
from typing import Any

from wirepipe import Pipeline, decode, jetstream_source, jsonl_sink, map_values


class Service:
    """The service: a heartbeat of its own, and the points it enriches and archives through wirepipe."""

    def __init__(self, url: str) -> None:
        self.heartbeats = 0
        self.pipeline = Pipeline(
            jetstream_source("POINTS", url=url, durable="points-service", batch_size=250),
            [*decode("msgpack|zstd"), map_values(self.enrich)],
            jsonl_sink("results/points.jsonl"),
            name="points-service",
            dead_letter=jsonl_sink("results/points-dead-letters.jsonl"),
            flush_interval=0.5,  # acknowledge at least twice a second
            shutdown_timeout=10.0,
        )

    def enrich(self, point: dict[str, Any]) -> dict[str, Any]:
        """The service's own logic, applied to each record inside the pipeline."""
        return {**point, "norm": round(math.hypot(point["x"], point["y"]), 3)}

    async def heartbeat(self, stop: asyncio.Event) -> None:
        """Stands for the rest of the service (an HTTP API, a scheduler...): works until stop is set."""
        while not stop.is_set():
            self.heartbeats += 1
            stats = self.pipeline.stats
            print(f"heartbeat {self.heartbeats}: {stats.records_out if stats else 0} points archived", flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        work = asyncio.create_task(self.heartbeat(stop))
        pipeline = asyncio.create_task(self.pipeline.run_async(stop))
        await stop.wait()
        print("stopping: draining the pipeline", flush=True)
        # The drain has a deadline: past it the run is cancelled, and what it had not acknowledged is
        # redelivered to the next start (the durable remembers).
        stats = await asyncio.wait_for(pipeline, self.pipeline.shutdown_timeout)
        await work
        print(f"stopped: {stats.records_out} points archived, {stats.rejected} rejected, "
              f"{stats.acked} acknowledged, {self.heartbeats} heartbeats", flush=True)


if __name__ == "__main__":
    asyncio.run(Service(os.environ["NATS_URL"]).run())
