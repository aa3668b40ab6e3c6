"""What a consuming worker really spends: the pipeline run for a few seconds in a worker process.

In-process timings of the codec stages and the sink leave out what a worker pays around them: the
event loop, the socket, pull requests and acks, the commit, GC. So the plan runs the consume pipeline
it plans for (a JetStream durable, the chain's decode, the sink) as a pool of one worker, then of a
worker per core, then of one worker again (the real spawner and supervisor, ``pipelines/pool.py``) against a
nats-server of its own (or the user's, ``wirepipe plan --url``, reached with its credentials and TLS), on a
stream of the dataset's encoded records with the chain's headers, and measures each in steady state (``measure_pool``:
from 20% of the records committed to each worker's last commit before the stream ran dry for it, 90% at
most, start-up and tail left out, cut at commits so that the window holds whole commit cycles; at least
``RUN_SECONDS`` where the stream holds the records for it):

- the workers' CPU per record, from their own reports (CPU seconds and records written in one snapshot);
- nats-server's CPU per record (``/proc``, where there is one);
- the share of a core the worker got (its CPU over the wall time: below 1 when other processes took
  the core, or the worker waited for the server), the part of the time it waited for a core, the part it
  had nothing to do, and the cores the rest of the machine kept busy meanwhile (``/proc/stat`` less the
  pool and its server): the pool's ceiling (``PoolRun.ceiling``) is what the cores left allow.

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
WINDOW = (0.2, 0.9)  # the part of the stream measured at most: after start-up, before the tail
RUN_SECONDS = 3.0  # how long the measured window lasts at least, where the stream holds the records for it
MIN_RECORDS, MAX_RECORDS = 3000, 150_000
FILL_WINDOW = 2000  # messages published between two awaited acks (``fill_stream``)


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
    slept: float = 0.0  # time a worker had nothing to do (neither on a core nor waiting for one) over the wall time

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def ceiling(self) -> float:
        """Records/s the pool's cores allow at its CPU costs: each worker on one core at most, and the workers,
        nats-server and the supervisor sharing what the rest of the machine left of the cores (``others``).
        Where nats-server's CPU is not known (no ``/proc``), the workers' and the supervisor's only."""
        return self._ceiling(self.others)

    def _ceiling(self, others: float) -> float:
        per_record = self.worker_us + (self.server_us or 0.0) + self.supervisor_us
        if self.worker_us <= 0:
            return 0.0
        return min(self.workers / self.worker_us, max(self.cores - others, 0.0) / per_record) * 1e6

    def rate_with(self, others: float | None) -> float:
        """The records/s this pool would have made had the rest of the machine kept ``others`` cores busy, not
        ``self.others``: its rate scaled by its ceiling at each load (it ran at the same part of its ceiling);
        ``None``: at the load it met, its rate."""
        ceiling = self.ceiling
        if others is None or ceiling <= 0:
            return self.rate
        return self.rate * self._ceiling(others) / ceiling


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


@dataclass
class _Mark:
    """What ``measure_pool`` noted when a worker reported a commit: each worker's last report after a commit (when,
    records written, CPU seconds) and the records it had read by then, and the CPU of nats-server, of this
    process, of the workers' main threads (on a core, waiting for one) and of the whole machine then."""

    reports: list[tuple[float, int, float]]
    read: list[int]
    server: float | None
    own: float
    at: float
    queue: tuple[float, float] | None
    busy: float | None

    @property
    def committed(self) -> int:
        return sum(r[1] for r in self.reports)


async def measure_pool(pool: Any, records: int, server_pid: int | None, *, window: tuple[float, float] = WINDOW,
                       poll: float = 0.02, seconds: float | None = None, stream: int | None = None) -> PoolRun:
    """Run ``pool`` (a ``pipelines.pool.Pool``) on a stream of at least ``records`` and measure its steady state, then
    drain it. ``RuntimeError`` when the pool failed or no steady window was seen. ``seconds``: the window lasts at
    least that long where the stream (``stream`` records, at least ``records``) has the records for it: past
    ``window[1]`` of ``records`` if need be (a calibration sized by a count of records from an estimate of their
    cost would otherwise last from one to several seconds, and a second samples a shared machine's load badly).

    The window starts once the workers committed ``window[0]`` of the records (start-up left out) and ends once
    they committed ``window[1]``, or sooner, for each worker, at its last commit after which it still read
    records: the commit after that came once the stream ran dry for it, after waiting for records that were no
    longer there and then for its ``flush_interval``, and that tail is not the pool's pace. (Ending at 90%
    committed alone put the tail in the window of short runs: one worker or two hold up to a sixth of a
    60,000-record stream uncommitted, and the window then held up to a second of waiting.)"""
    from ...pipelines.pool import usable_cores

    task = asyncio.ensure_future(pool.run())
    marks: list[_Mark] = []
    last: list[tuple[float, int, float]] | None = None
    read = [0] * pool.workers  # records each worker had read at its last report after a commit
    now = read
    try:
        while not task.done():
            # Each worker's last report after a commit: between two of them a worker did whole commit cycles (a
            # window cut anywhere else would hold one commit, a Parquet part's write, more or less than its records
            # paid for).
            reports = [s.at_commit or (0.0, 0, 0.0) for s in pool.slots]
            now = [int(s.snapshot.get("records_in", 0)) for s in pool.slots]
            if reports != last:
                read = [now[i] if last is None or reports[i] != last[i] else read[i] for i in range(pool.workers)]
                last = reports
                marks.append(_Mark(reports, read, process_cpu(server_pid) if server_pid else None,
                                   time.process_time(), time.monotonic(),
                                   run_queue([s.proc.pid for s in pool.slots if s.proc is not None]), machine_busy()))
            found = steady_window(marks, now, records, window, seconds)
            if (found is not None and found[1].committed >= window[1] * records
                    and (seconds is None or found[1].at - found[0].at >= seconds)) \
                    or sum(r[1] for r in reports) >= (stream or records):
                break  # the window's last mark is known to be steady, or everything is committed
            await asyncio.sleep(poll)
    finally:
        pool.stop()
        code = await task
    found = steady_window(marks, now, records, window, seconds)
    if code != 0 or found is None:
        raise RuntimeError(f"the pool of {pool.workers} did not run through ({pool.gave_up or f'exit {code}'}, "
                           f"{'a' if found else 'no'} steady window)")
    return _pool_run(pool.workers, *found, usable_cores())


def steady_window(marks: Sequence[_Mark], read: Sequence[int], records: int,
                  window: tuple[float, float] = WINDOW, seconds: float | None = None) -> tuple[_Mark, _Mark] | None:
    """The first and last mark of the steady window (``measure_pool``), given what each worker had read in all
    (``read``): a mark is steady when every worker read more after its commit in it; the window goes from the
    first steady mark past ``window[0]`` of the ``records`` committed to the last one up to ``window[1]``, or, where
    that lasts less than ``seconds``, to the first steady mark after it that makes ``seconds`` (else the last).

    One worker on 60,000 records, committing every 10,000: its commit at 53,000 came with records still to read,
    the one at 60,000 after the stream ran dry (a tail of waiting for records and for the flush interval):

    >>> marks = [_Mark([(t, n, 0.0)], [n + 900], None, 0.0, t, None, None)
    ...          for t, n in [(1.0, 3000), (2.0, 13000), (3.0, 23000), (4.0, 33000), (5.0, 43000), (6.0, 53000)]]
    >>> marks.append(_Mark([(7.2, 60000, 0.0)], [60000], None, 0.0, 7.2, None, None))
    >>> first, last = steady_window(marks, [60000], 60000)
    >>> first.committed, last.committed  # 90% (54,000) was committed only by the commit after the tail
    (13000, 53000)
    """
    until = next((i for i, m in enumerate(marks) if m.committed >= window[1] * records), len(marks) - 1)
    steady = [i for i, m in enumerate(marks) if all(r < n for r, n in zip(m.read, read, strict=True))]
    within = [i for i in steady if i <= until]
    start = next((i for i in within if marks[i].committed >= window[0] * records), None)
    if start is None:
        return None
    last = within[-1]
    if seconds is not None and marks[last].at - marks[start].at < seconds:
        last = next((i for i in steady if marks[i].at - marks[start].at >= seconds), steady[-1])
    return (marks[start], marks[last]) if last != start else None


def _pool_run(workers: int, first: _Mark, last: _Mark, cores: int) -> PoolRun:
    """The pool's steady state between two marks (``measure_pool``)."""
    done = sum(b[1] - a[1] for a, b in zip(first.reports, last.reports, strict=True))
    cpu = sum(b[2] - a[2] for a, b in zip(first.reports, last.reports, strict=True))
    rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(first.reports, last.reports, strict=True) if b[0] > a[0]]
    seconds = done / sum(rates) if rates and sum(rates) > 0 else 0.0
    if done <= 0 or seconds <= 0:
        raise RuntimeError(f"the pool of {workers} wrote nothing between two reports in the measured window")
    server = (last.server - first.server) / done * 1e6 if first.server is not None and last.server is not None else None
    share = cpu / seconds / workers
    wall = last.at - first.at
    q0, q1 = first.queue, last.queue
    waited = (q1[1] - q0[1]) / wall / workers if q0 and q1 and wall > 0 else 0.0
    # the rest of the time a worker's thread was off a core and not waiting for one: it waited for records, acks or I/O
    slept = max(0.0, 1 - ((q1[0] - q0[0]) + (q1[1] - q0[1])) / wall / workers) if q0 and q1 and wall > 0 else 0.0
    others = 0.0
    if q0 and q1 and first.busy is not None and last.busy is not None and first.server is not None \
            and last.server is not None and wall > 0:
        ours = (q1[0] - q0[0]) + (last.server - first.server) + (last.own - first.own)
        others = max(0.0, (last.busy - first.busy - ours) / wall)
    return PoolRun(workers, done, seconds, cpu / done * 1e6, server, (last.own - first.own) / done * 1e6, share,
                   waited, others, cores, slept)


async def fill_stream(nats: NatsConnectionConfig, payloads: Sequence[bytes], records: int, *,
                      headers: dict[str, str] | None = None, stream: str = STREAM, subject: str = SUBJECT,
                      replicas: int = 1) -> float:
    """A fresh stream of ``records`` messages, ``payloads`` over and over, on the server ``nats`` reaches (its
    credentials and TLS, as a pipeline's connection); returns the records/s it was stored at.

    Windows of ``FILL_WINDOW`` messages: core publishes, the last one a JetStream publish whose ack is awaited.
    A stream stores what one connection sends in order, so that ack says the whole window is stored, and the
    server's ingest queue never holds more than a window. It costs the client a tenth of a ``publish_async`` per
    message (a future and a reply subject each). What the stream holds at the end is checked."""
    from ...connectors.nats.connection import NatsConnection
    from ..bench.timing import Stopwatch

    conn = NatsConnection(nats, role="plan")
    nc = await conn.connect()
    try:
        js = nc.jetstream()
        await delete_stream(js, stream)
        await js.add_stream(name=stream, subjects=[subject], num_replicas=replicas)
        watch = Stopwatch()
        for start in range(0, records, FILL_WINDOW):
            end = min(start + FILL_WINDOW, records)
            for i in range(start, end - 1):
                await nc.publish(subject, payloads[i % len(payloads)], headers=headers)
            await js.publish(subject, payloads[(end - 1) % len(payloads)], headers=headers, timeout=30)
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


def merged(a: PoolRun, b: PoolRun) -> PoolRun:
    """Two runs of the same pool as one window: records and seconds summed, the CPU per record weighted by the
    records, the shares of the time by the seconds."""
    records, seconds = a.records + b.records, a.seconds + b.seconds

    def per_record(x: float, y: float) -> float:
        return (x * a.records + y * b.records) / records

    def per_second(x: float, y: float) -> float:
        return (x * a.seconds + y * b.seconds) / seconds

    server = per_record(a.server_us, b.server_us) if a.server_us is not None and b.server_us is not None else None
    return PoolRun(a.workers, records, seconds, per_record(a.worker_us, b.worker_us), server,
                   per_record(a.supervisor_us, b.supervisor_us), per_second(a.share, b.share),
                   per_second(a.waited, b.waited), per_second(a.others, b.others), a.cores, per_second(a.slept, b.slept))


@dataclass
class Calibration:
    """The consume pipeline measured as one worker alone and as a worker per core (``full``; None on one core):
    with every core busy a worker spends more per record (the cores' caches, the server and the supervisor
    taking turns) and may wait, which one worker alone does not show. One worker runs again after the full pool
    (``again``): the same pool, seconds later, says how far this machine's pace moves by itself (``drift``)."""

    one: PoolRun
    full: PoolRun | None = None
    server: str = "a local nats-server"  # where it ran: the plan's own server, or the user's (its url)
    again: PoolRun | None = None  # one worker again, after the full pool

    @property
    def busiest(self) -> PoolRun:
        """The run with the most workers: what a worker spends when the machine is full."""
        return self.full or self.alone

    @property
    def alone(self) -> PoolRun:
        """One worker, both of its runs as one window: the machine's pace sampled twice, seconds apart."""
        return merged(self.one, self.again) if self.again is not None else self.one

    def alone_rate(self, others: float | None = None) -> float:
        """One worker's records/s, both runs as one window, each run's time scaled to the load ``others`` by its own
        ceiling (``PoolRun.rate_with``; None: each at the load it met, ``alone.rate``). Not ``alone.rate_with``: a
        ceiling of averaged costs and loads is not the average of the runs' ceilings where the load moved."""
        runs = [self.one] if self.again is None else [self.one, self.again]
        seconds = sum(r.records / r.rate_with(others) for r in runs if r.rate_with(others) > 0)
        return sum(r.records for r in runs) / seconds if seconds > 0 else 0.0

    @property
    def drift(self) -> float | None:
        """The records/s of one worker's second run over its first: 1.0 where the machine held its pace (no
        prediction can be nearer than the same pool is to itself seconds later)."""
        if self.again is None or self.one.rate <= 0:
            return None
        return self.again.rate / self.one.rate


async def calibrate_consume(chain: str, sink: str, payloads: Sequence[bytes], estimate_us: float,
                            schema: str | None = None, nats: NatsConnectionConfig | None = None, *,
                            headers: dict[str, str] | None = None) -> Calibration:
    """The consume pipeline as one worker, then as a worker per core, each on a durable of its own, measured in
    steady state (see the module doc): on a local nats-server (a temporary store), or on the server ``nats``
    reaches (``wirepipe plan --url``: its credentials and TLS; its CPU is not read there, and the stream is
    deleted afterwards). ``payloads``: the dataset's records encoded with ``chain``, published with ``headers``
    (the chain's: what a pipeline's records carry, and its workers parse)."""
    from ...connectors.nats.connection import NatsConnectionConfig
    from ...connectors.nats.server import EmbeddedServer
    from ...pipelines.pool import Pool, usable_cores
    from ...pipelines.restarts import RestartPolicy

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
            stream = records * min(cores, 2)  # the full pool reads it all; one worker as far as its window needs
            await fill_stream(nats, payloads, stream, headers=headers)

            async def run(workers: int, durable: str, until: int, stream: int) -> PoolRun:
                assert nats is not None
                pool = Pool(consume_pipeline(nats, chain, sink, tmp / durable, durable=durable, schema=schema),
                            workers,
                            restart=RestartPolicy(max_failures=1), echo=lambda _line: None,
                            log_level=logging.WARNING)
                return await measure_pool(pool, until, pid, seconds=RUN_SECONDS, stream=stream)

            try:
                one = await run(1, "calibration-one", records, stream)
                full = await run(cores, "calibration-full", stream, stream) if cores > 1 else None
                again = await run(1, "calibration-again", records, stream)
            finally:
                if theirs:
                    await drop_stream(nats)
            return Calibration(one, full, server=f"{nats.public_params()['url']}" if theirs else Calibration.server,
                               again=again)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
