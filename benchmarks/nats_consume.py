"""Consume pipeline ``core NATS -> zstd -> msgpack -> null`` vs a hand-written nats-py callback loop.

A separate process publishes N point records (msgpack + zstd, wire headers) as fast as
it can; the consumer in this process, with pending limits large enough for no drops,
decompresses and unpacks every one. Throughput is first to last message received;
latency is Wirepipe-Sent-At to receipt (it includes the backlog when the consumer is
the slower side, as in ``nats bench``).

    python benchmarks/nats_consume.py [--count 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from natsbench import Result, attach_latency, report, start_publisher
from wirepipe.connectors.nats.core_source import NatsSource
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.connectors.null import NullSink
from wirepipe.core.batch import Batch
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.wire import Header


class LatencySink(NullSink):
    """Null sink that also keeps first/last arrival and per-record latency (from the source's meta)."""

    # Not TestingSink: keep=False drops the meta columns and keep=True copies every record, subject and
    # header inside the timed run; this needs the arrival times and one latency per record only.

    def __init__(self) -> None:
        super().__init__()
        self.first = 0.0
        self.last = 0.0
        self.lat: list[int] = []

    async def write(self, batch: Batch) -> None:
        if not self.first:
            self.first = time.perf_counter()
        await super().write(batch)
        sent = batch.meta.get("sent_ns")
        recv = batch.meta.get("received_ns")
        if sent and recv:
            self.lat.extend(r - s for s, r in zip(sent, recv, strict=True) if s)
        self.last = time.perf_counter()


async def stalled(progress: Any, n: int, waiter: Any, patience: float = 5.0) -> None:
    """Wait for ``waiter``, giving up when ``progress()`` has not moved for ``patience`` seconds
    (core NATS is at-most-once: on a loaded machine the server may drop messages to a slow client)."""
    task = asyncio.ensure_future(waiter)
    last, since = -1, time.monotonic()
    while not task.done():
        await asyncio.wait({task}, timeout=0.5)
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > patience:
            break
    if not task.done() and not isinstance(waiter, asyncio.Task):
        task.cancel()


async def wirepipe_run(url: str, n: int, lat: list[float]) -> tuple[float, float]:
    source = NatsSource("bench.con", url=url, count=n, pending_msgs_limit=n + 10,
                        pending_bytes_limit=0)
    sink = LatencySink()
    pipe = Pipeline(source, [Decompress("zstd"), Deserialize("msgpack")], sink, flush_interval=3600)
    task = asyncio.ensure_future(pipe.run_async())
    while not source.ready.is_set():
        await asyncio.sleep(0.005)
    cpu0 = time.process_time()
    pub = start_publisher(url, "bench.con", n)
    await stalled(lambda: sink.records, n, task)
    source.stopping.set()
    stats = await task
    pub.wait()
    if stats.records_out < n:
        print(f"wirepipe: {stats.records_out:,} of {n:,} received ({source.dropped:,} slow-consumer drops)")
    span = sink.last - sink.first
    lat[:] = [v / 1000 for v in sink.lat]
    return stats.records_out / span, stats.records_out / (time.process_time() - cpu0)


async def hand_run(url: str, n: int, lat: list[float]) -> tuple[float, float]:
    import msgpack
    import nats
    import zstandard

    nc = await nats.connect(url)
    decompress = zstandard.ZstdDecompressor().decompress
    unpack = msgpack.unpackb
    got = 0
    first = last = 0.0
    done = asyncio.Event()
    lats: list[int] = []

    async def cb(msg: Any) -> None:
        nonlocal got, first, last
        if not got:
            first = time.perf_counter()
        unpack(decompress(msg.data))
        h = msg.headers
        lats.append(time.time_ns() - int(h[Header.SENT_AT]))
        got += 1
        if got >= n:
            last = time.perf_counter()
            done.set()

    await nc.subscribe("bench.con", cb=cb, pending_msgs_limit=n + 10, pending_bytes_limit=0)
    await nc.flush()
    cpu0 = time.process_time()
    pub = start_publisher(url, "bench.con", n)
    await stalled(lambda: got, n, done.wait())
    pub.wait()
    if got < n:
        print(f"hand loop: {got:,} of {n:,} received")
        last = time.perf_counter()
    await nc.close()
    lat[:] = [v / 1000 for v in lats]
    return got / (last - first), got / (time.process_time() - cpu0)


def payload_bytes(n: int) -> int:
    import msgpack
    import zstandard

    from wirepipe.datasets import get_dataset

    compress = zstandard.ZstdCompressor(level=1).compress
    return sum(len(compress(msgpack.packb(r))) for c in get_dataset("point").records(n, 0, 1000) for r in c)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    n = args.count
    runs = {"wirepipe pipeline": wirepipe_run, "hand-written callback loop": hand_run}
    wall = {k: Result(k) for k in runs}
    cpu = {k: Result(k) for k in runs}
    lats: dict[str, list[float]] = {k: [] for k in runs}
    size = payload_bytes(n) / n
    async with EmbeddedServer() as srv:
        for run in runs.values():  # warm-up, not recorded
            await run(srv.url, n // 10, [])
        for r in range(args.rounds):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                lat: list[float] = []
                rate, cpu_rate = await runs[name](srv.url, n, lat)
                wall[name].rates.append(rate)
                wall[name].mbps.append(rate * size / 1e6)
                cpu[name].rates.append(cpu_rate)
                cpu[name].mbps.append(cpu_rate * size / 1e6)
                lats[name] += lat
    attach_latency(wall, lats)
    title = (f"core NATS consume, point msgpack+zstd -> decompress -> unpack -> null, {n:,} records x "
             f"{args.rounds} rounds (publisher in another process)")
    report(title + ": wall clock, first to last message", wall, "wirepipe pipeline", "hand-written callback loop")
    # On 2 shared cores the publisher, the server and the consumer race each other; the consumer's own CPU
    # time per record is the steadier measure of what each variant costs.
    report(title + ": records per second of consumer CPU time", cpu, "wirepipe pipeline",
           "hand-written callback loop")


if __name__ == "__main__":
    asyncio.run(main())
