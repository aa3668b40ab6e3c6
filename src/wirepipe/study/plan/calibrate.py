"""What a consuming worker really spends: the pipeline run for a few seconds in a worker process.

In-process timings of the codec stages and the sink leave out what a worker pays around them: the
event loop, the socket, pull requests and acks, the commit, GC. So the plan runs the consume pipeline
it plans for (a JetStream durable, the chain's decode, the sink) as a pool of one worker, then of a
worker per core (the real spawner and supervisor, ``pipelines/pool.py``) against a nats-server of its
own (or the user's, ``wirepipe plan --url``, reached with its credentials and TLS), on a stream of the dataset's encoded records, and measures each in steady state (``measure_pool``:
from 20% to 90% of the records committed, start-up and tail left out, cut at commits so that the window
holds whole commit cycles):

- the workers' CPU per record, from their own reports (CPU seconds and records written in one snapshot);
- nats-server's CPU per record (``/proc``, where there is one);
- the share of a core the worker got (its CPU over the wall time: below 1 when other processes took
  the core, or the worker waited for the server), the part of the time it waited for a core, and the
  cores the rest of the machine kept busy meanwhile (``/proc/stat`` less the pool and its server).

``benchmarks/bench_workers.py`` measures its pools with the same ``measure_pool``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...connectors.nats.connection import NatsConnectionConfig

STREAM = "PLAN_CALIBRATION"
SUBJECT = "plan.calibration"
WINDOW = (0.2, 0.9)  # the part of the stream measured: after start-up, before the tail
RUN_SECONDS = 3.0  # about how long the measured window lasts
MIN_RECORDS, MAX_RECORDS = 3000, 150_000


@dataclass
class PoolRun:
    """A pool's steady state: records/s, and CPU microseconds per record of its workers, nats-server and the
    supervisor (the process that ran ``measure_pool``), between two reports of each worker after a commit."""

    workers: int
    records: int  # written by the workers within the window
    seconds: float
    worker_us: float
    server_us: float | None  # None where another process's CPU cannot be read (no /proc)
    supervisor_us: float
    share: float  # CPU of a worker over the wall time (1: a whole core)
    waited: float = 0.0  # time a worker waited for a core (the run queue) over the wall time
    others: float = 0.0  # cores kept busy by the rest of the machine (not the pool, its server, the supervisor)
    cores: int = 1  # the cores the pool could run on (its machine's, or its container's)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def run_queue(pids: Sequence[int]) -> tuple[float, float] | None:
    """Seconds on a core and seconds waiting for one (the run queue), summed over ``pids``, from
    ``/proc/PID/schedstat``; None where it cannot be read."""
    on = waited = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat", "rb") as f:
                fields = f.read().split()
        except OSError:
            return None
        on, waited = on + int(fields[0]), waited + int(fields[1])
    return on / 1e9, waited / 1e9


def machine_busy() -> float | None:
    """CPU seconds every core of the machine spent busy so far (``/proc/stat``); None where it cannot be read."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    guests = sum(fields[8:10]) if len(fields) > 9 else 0  # guest time is counted in user time already
    return (sum(fields) - idle - guests) / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of process ``pid`` so far, from ``/proc``; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure_pool(pool: Any, records: int, server_pid: int | None, *, window: tuple[float, float] = WINDOW,
                       poll: float = 0.02) -> PoolRun:
    """Run ``pool`` (a ``pipelines.pool.Pool``) until its workers committed the last fraction of ``window``
    (of ``records``), then drain it; its steady state between the two. ``RuntimeError`` when the pool failed
    or the window was not seen."""
    from ...pipelines.pool import usable_cores

    task = asyncio.ensure_future(pool.run())
    marks: list[tuple[list[tuple[float, int, float]], float | None, float, float, tuple[float, float] | None,
                      float | None]] = []
    try:
        while not task.done():
            # Each worker's last report after a commit: when it came, what it had written, its CPU. Between
            # two of them a worker did whole commit cycles: a window cut anywhere else would hold one commit
            # (a Parquet part's write) more or less than its records paid for.
            reports = [s.at_commit or (0.0, 0, 0.0) for s in pool.slots]
            committed = sum(r[1] for r in reports)
            if len(marks) < len(window) and committed >= window[len(marks)] * records:
                pids = [s.proc.pid for s in pool.slots if s.proc is not None]
                marks.append((reports, process_cpu(server_pid) if server_pid else None, time.process_time(),
                              time.monotonic(), run_queue(pids), machine_busy()))
            if len(marks) == len(window) or committed >= records:
                break
            await asyncio.sleep(poll)
    finally:
        pool.stop()
        code = await task
    if code != 0 or len(marks) < 2:
        raise RuntimeError(f"the pool of {pool.workers} did not run through ({pool.gave_up or f'exit {code}'}, "
                           f"{len(marks)} of 2 marks)")
    (first, server0, own0, t0, queue0, busy0), (last, server1, own1, t1, queue1, busy1) = marks
    done = sum(b[1] - a[1] for a, b in zip(first, last, strict=True))
    cpu = sum(b[2] - a[2] for a, b in zip(first, last, strict=True))
    rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(first, last, strict=True) if b[0] > a[0]]
    seconds = done / sum(rates) if rates and sum(rates) > 0 else 0.0
    if done <= 0 or seconds <= 0:
        raise RuntimeError(f"the pool of {pool.workers} wrote nothing between two reports in the measured window")
    server = (server1 - server0) / done * 1e6 if server0 is not None and server1 is not None else None
    share = cpu / seconds / pool.workers
    waited = (queue1[1] - queue0[1]) / (t1 - t0) / pool.workers if queue0 and queue1 and t1 > t0 else 0.0
    others = 0.0
    if (queue0 and queue1 and busy0 is not None and busy1 is not None and server0 is not None
            and server1 is not None and t1 > t0):
        ours = (queue1[0] - queue0[0]) + (server1 - server0) + (own1 - own0)
        others = max(0.0, (busy1 - busy0 - ours) / (t1 - t0))
    return PoolRun(pool.workers, done, seconds, cpu / done * 1e6, server, (own1 - own0) / done * 1e6, share, waited,
                   others, usable_cores())


async def fill_stream(nats: NatsConnectionConfig, payloads: Sequence[bytes], records: int, *,
                      headers: dict[str, str] | None = None, stream: str = STREAM, subject: str = SUBJECT,
                      replicas: int = 1) -> float:
    """A fresh stream of ``records`` messages, ``payloads`` over and over (publish_async, windows of 2000 acks
    awaited), on the server ``nats`` reaches (its credentials and TLS, as a pipeline's connection); returns the
    records/s it was published at."""
    from ...connectors.nats.connection import NatsConnection
    from ..bench.timing import Stopwatch

    conn = NatsConnection(nats, role="plan")
    nc = await conn.connect()
    try:
        js = nc.jetstream()
        await delete_stream(js, stream)
        await js.add_stream(name=stream, subjects=[subject], num_replicas=replicas)
        watch = Stopwatch()
        window: list[Any] = []
        for i in range(records):
            window.append(await js.publish_async(subject, payloads[i % len(payloads)], headers=headers))
            if len(window) >= 2000:
                await asyncio.gather(*window)
                window = []
        await asyncio.gather(*window)
        rate = records / watch.seconds
        stored = (await js.stream_info(stream)).state.messages
        if stored != records:
            raise RuntimeError(f"stream {stream} holds {stored} messages, not the {records} published")
        return rate
    finally:
        await conn.close()


async def delete_stream(js: Any, stream: str) -> None:
    """Delete ``stream`` if it exists (a calibration's, before and after it)."""
    with contextlib.suppress(Exception):  # it may not exist
        await js.delete_stream(stream)


async def drop_stream(nats: NatsConnectionConfig, stream: str = STREAM) -> None:
    """Delete the calibration's stream (with its durables) from a server of the user's: it leaves nothing there."""
    from ...connectors.nats.connection import NatsConnection

    conn = NatsConnection(nats, role="plan")
    nc = await conn.connect()
    try:
        await delete_stream(nc.jetstream(), stream)
    finally:
        await conn.close()


def consume_pipeline(nats: NatsConnectionConfig, chain: str, sink: str, out: Path, *,
                     durable: str = "plan-calibration", stream: str = STREAM, schema: str | None = None
                     ) -> dict[str, Any]:
    """The consume pipeline a plan is for, as a config: a durable with the source's defaults on the server
    ``nats`` reaches, the chain's decode, the sink (null, or Parquet part files in ``out``), committed every
    second."""
    sinks = {"null": {"type": "null"}, "parquet": {"type": "parquet", "path": str(out / "part-{part}.parquet")}}
    return {
        "name": "plan-calibration",
        "source": {"type": "jetstream", **nats.settings(), "stream": stream, "durable": durable, "ack_wait": "60s"},
        "operators": [{"decode": {"chain": chain, "schema": schema} if schema else chain}],
        "sink": sinks[sink],
        "flush_interval": "1s",
        "shutdown_timeout": "60s",
        "monitor": {"status_interval": 0},
    }


def calibration_records(estimate_us: float) -> int:
    """Records for a window of about ``RUN_SECONDS`` at ``estimate_us`` per record (the in-process figure)."""
    per_second = 1e6 / max(estimate_us, 1.0)
    wanted = per_second * RUN_SECONDS / (WINDOW[1] - WINDOW[0])
    return int(min(MAX_RECORDS, max(MIN_RECORDS, wanted)))


@dataclass
class Calibration:
    """The consume pipeline measured as one worker alone and as a worker per core (``full``; None on one core):
    with every core busy a worker spends more per record (the cores' caches, the server and the supervisor
    taking turns) and may wait, which one worker alone does not show."""

    one: PoolRun
    full: PoolRun | None = None
    server: str = "a local nats-server"  # where it ran: the plan's own server, or the user's (its url)

    @property
    def busiest(self) -> PoolRun:
        """The run with the most workers: what a worker spends when the machine is full."""
        return self.full or self.one


async def calibrate_consume(chain: str, sink: str, payloads: Sequence[bytes], estimate_us: float,
                            schema: str | None = None, nats: NatsConnectionConfig | None = None) -> Calibration:
    """The consume pipeline as one worker, then as a worker per core, each on a durable of its own, measured in
    steady state (see the module doc): on a local nats-server (a temporary store), or on the server ``nats``
    reaches (``wirepipe plan --url``: its credentials and TLS; its CPU is not read there, and the stream is
    deleted afterwards). ``payloads``: the dataset's records encoded with ``chain``."""
    from ...connectors.nats.connection import NatsConnectionConfig
    from ...connectors.nats.server import EmbeddedServer
    from ...pipelines.pool import Pool, RestartPolicy, usable_cores

    records = calibration_records(estimate_us)
    cores = usable_cores()
    theirs = nats is not None  # the user's server: the stream goes afterwards
    tmp = Path(tempfile.mkdtemp(prefix="wirepipe-plan-"))
    try:
        with contextlib.ExitStack() as stack:
            pid = None
            if nats is None:
                server = stack.enter_context(EmbeddedServer(store_dir=tmp / "store"))
                pid = server.proc.pid if server.proc else None
                nats = NatsConnectionConfig(url=server.url)
            await fill_stream(nats, payloads, records * min(cores, 2))  # the full pool reads it all

            async def run(workers: int, durable: str, until: int) -> PoolRun:
                assert nats is not None
                pool = Pool(consume_pipeline(nats, chain, sink, tmp / durable, durable=durable, schema=schema),
                            workers,
                            restart=RestartPolicy(max_failures=1), echo=lambda _line: None,
                            log_level=logging.WARNING)
                return await measure_pool(pool, until, pid)

            try:
                one = await run(1, "calibration-one", records)
                full = await run(cores, "calibration-full", records * min(cores, 2)) if cores > 1 else None
            finally:
                if theirs:
                    await drop_stream(nats)
            return Calibration(one, full, server=f"{nats.public_params()['url']}" if theirs else Calibration.server)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
