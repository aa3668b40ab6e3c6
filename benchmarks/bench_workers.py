"""Scaling out: records/s of ``wirepipe run --workers 2`` vs ``--workers 1``, and of a 3-node R3 cluster vs one server.

The pipeline is CPU-heavy on the consume side: ``block`` records (10.8 kB msgpack, 3.7 kB after
zstd best) from a JetStream stream through one shared durable, zstd decompress + msgpack decode,
written as Parquet part files, acked after each part is complete. Both pool sizes run as a real
supervisor (``Pool``) with real worker processes, alternately, in one run; the rate is the
steady state from 20% of the stream written to each worker's last commit before the stream ran dry
for it (process start-up and the tail excluded: ``wirepipe.study.plan.calibrate.measure_pool``, as
``wirepipe plan`` calibrates). Where the second worker's records go: the CPU per record of the
workers, nats-server and the supervisor in the same window, the share of a core each worker got,
the time it waited for one (the run queue: other processes on the machine) and the time it had
nothing to do. A hand-written single-process loop (nats-py fetch + ack, zstd, msgpack, pyarrow)
doing the same work is measured in the same run, for scale. Last, the ceiling: what the pool's cores
allow when the workers and nats-server share them (the cores the rest of the machine left, over the
CPU per record of a worker, the server and the supervisor; ``PoolRun.ceiling``), against one
worker's rate, and the pool's rate over it: on a machine with as many cores as workers, the server's
CPU per record is what keeps the ratio below the number of workers.

The cluster part fills an R3 stream on a local 3-node cluster and an R1 stream on one server
(publish rate with acks: the cost of replication) and consumes both with ``--workers 2``.

    python benchmarks/bench_workers.py [--count 120000] [--rounds 3] [--no-cluster]

On a 2-core machine the target is ``--workers 2`` at >= 0.95 of its ceiling (the median of the
rounds); figures swing with anything else running on the machine (run it on a quiet one: the
ceiling leaves out the cores others kept busy, but not the caches and memory bandwidth they share). ``benchmarks/bench_plan.py`` checks ``wirepipe plan``'s prediction against these pools.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wirepipe.connectors.nats.connection import connection_config
from wirepipe.connectors.nats.server import EmbeddedServer, LocalCluster
from wirepipe.datasets import get_dataset
from wirepipe.pipelines.pool import Pool, RestartPolicy, usable_cores
from wirepipe.study.plan.calibrate import PoolRun, fill_stream, measure_pool
from wirepipe.wire import Header

SUBJECT = "bench.blocks"
STREAM = "BLOCKS"
_round = iter(range(10_000))


def encoded_blocks(distinct: int = 400) -> list[bytes]:
    """``block`` records as msgpack + zstd best (pre-encoded once: the bench measures the consume side)."""
    import msgpack
    import zstandard

    comp = zstandard.ZstdCompressor(level=19)
    records = [v for chunk in get_dataset("block").records(distinct, 0, 1000) for v in chunk]
    return [comp.compress(msgpack.packb(r)) for r in records]


async def fill(url: str, n: int, payloads: list[bytes], replicas: int) -> float:
    """A fresh stream with n records; returns the records/s it was published at (acks awaited)."""
    headers = {Header.CONTENT_TYPE: "application/msgpack", Header.CONTENT_ENCODING: "zstd"}
    return await fill_stream(connection_config(url), payloads, n, headers=headers, stream=STREAM, subject=SUBJECT,
                             replicas=replicas)


def settle(store: Path) -> None:
    """Write the stream just filled to disk (fsync of the server's store files): left to the kernel, its writeback
    comes ~30 s later, in the first pool's window, which the later pools do not pay."""
    for path in store.rglob("*"):
        if path.is_file():
            with contextlib.suppress(OSError), open(path, "rb+") as f:
                os.fsync(f.fileno())


def pipeline(url: str, out: Path, durable: str) -> dict[str, Any]:
    return {
        "name": "bench-workers",
        "source": {"type": "jetstream", "url": url, "stream": STREAM, "durable": durable, "batch_size": 500,
                   "max_ack_pending": 20000, "ack_wait": "60s"},
        "operators": [{"decompress": {"codec": "zstd"}}, {"deserialize": {"format": "msgpack"}}],
        "sink": {"type": "parquet", "path": str(out / "part-{part}.parquet")},
        "flush_interval": "1s",
        "shutdown_timeout": "60s",
        "monitor": {"status_interval": 0},
    }


RUNS: dict[str, list[PoolRun]] = {}  # each pool size's measured rounds


async def run_pool(url: str, n: int, workers: int, tmp: Path, server_pid: int | None,
                   config: Callable[[str, Path, str], dict[str, Any]] = pipeline) -> float:
    """Steady-state records/s of an N-worker pool over a fresh durable (``measure_pool``); ``config``: the pipeline
    for a server url, an output folder and a durable."""
    out = tmp / f"out-{workers}-{next(_round)}"
    pool = Pool(config(url, out, f"bench{next(_round)}"), workers, restart=RestartPolicy(max_failures=1),
                echo=lambda _line: None)
    try:
        run = await measure_pool(pool, n, server_pid)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    finally:
        shutil.rmtree(out, ignore_errors=True)
    RUNS.setdefault(f"workers {workers}", []).append(run)
    return run.rate


async def hand_loop(url: str, n: int, tmp: Path) -> float:
    """The same work in one process by hand: fetch + decompress + unpack + Parquet per 5000 + ack after write."""
    import msgpack
    import nats
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    from nats.js.api import ConsumerConfig

    nc = await nats.connect(url.split(","))
    js = nc.jetstream()
    sub = await js.pull_subscribe(SUBJECT, durable=f"hand{next(_round)}", stream=STREAM,
                                  config=ConsumerConfig(max_ack_pending=20000, ack_wait=60))
    decompress = zstandard.ZstdDecompressor().decompress
    unpack = msgpack.unpackb
    out = tmp / f"hand-{next(_round)}"
    out.mkdir()
    got, part, pending, rows = 0, 0, [], []
    t10 = t90 = 0.0
    while got < n:
        msgs = await sub.fetch(min(500, n - got), timeout=30)
        rows += [unpack(decompress(m.data)) for m in msgs]
        pending += msgs
        got += len(msgs)
        if len(rows) >= 5000 or got >= n:
            part += 1
            pq.write_table(pa.Table.from_pylist(rows), out / f"part-{part:05d}.parquet")
            for m in pending:
                await m.ack()
            rows, pending = [], []
        if not t10 and got >= 0.1 * n:
            t10 = time.perf_counter()
        if not t90 and got >= 0.9 * n:
            t90 = time.perf_counter()
    await nc.flush()
    await nc.close()
    shutil.rmtree(out, ignore_errors=True)
    return 0.8 * n / (t90 - t10)


def breakdown(cores: int) -> None:
    """Where each pool's cores went (medians of the rounds): CPU per record of the workers, nats-server and the
    supervisor; per worker the share of a core it got, the part of the time it waited for one and the part it
    had nothing to do; the cores the rest of the machine kept busy; and the pool's rate over its ceiling, round
    by round (``PoolRun.ceiling``: what the cores the rest of the machine left allow at the CPU costs measured)."""
    from wirepipe.core.table import Table

    def med(values: list[float]) -> float:
        return statistics.median(values)

    rows = []
    for name, runs in RUNS.items():
        rate = med([r.rate for r in runs])
        worker, supervisor = med([r.worker_us for r in runs]), med([r.supervisor_us for r in runs])
        server = med([r.server_us for r in runs if r.server_us is not None] or [0.0])
        busy = rate * (worker + server + supervisor) / 1e6
        rows.append([name, f"{rate:,.0f}", f"{worker:.1f}", f"{server:.1f}", f"{supervisor:.1f}",
                     f"{med([r.share for r in runs]):.2f}", f"{med([r.waited for r in runs]):.2f}",
                     f"{med([r.slept for r in runs]):.2f}", f"{busy:.2f} of {cores}",
                     f"{med([r.others for r in runs]):.2f}", f"{med([r.rate / r.ceiling for r in runs]):.2f}"])
    print(Table("where the cores went, steady state (medians of the rounds)",
                ["pool", "records/s", "worker us", "nats-server us", "supervisor us", "core share", "waited",
                 "idle", "cores busy", "others", "of ceiling"], rows,
                caption="us: CPU per record; core share: each worker's CPU over the wall time; waited: the part of "
                        "the time each worker was runnable and waited for a core; idle: the part it had nothing "
                        "to do (records, acks or the disk not there yet); cores busy: the pool, its server and the "
                        "supervisor; others: cores the rest of the machine kept busy; of ceiling: the pool's rate "
                        "over what the cores left to it allow at these costs")
          .text(elsewhere=None), end="")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=120000, help="records in the stream (a short run's window is "
                    "mostly the pools' start-up and their first commits)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = ap.parse_args()
    n = args.count
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    payloads = encoded_blocks()
    figures: dict[str, Any] = {"count": n, "record_bytes_wire": statistics.mean(len(p) for p in payloads)}
    try:
        with EmbeddedServer(store_dir=tmp / "single") as single:
            pid = single.proc.pid if single.proc else None
            publish_r1 = await fill(single.url, n, payloads, 1)
            settle(tmp / "single")
            rates: dict[str, list[float]] = {"workers 1": [], "workers 2": [], "hand loop": []}
            for _ in range(args.rounds):  # interleaved, so contention hits every variant alike
                rates["workers 1"].append(await run_pool(single.url, n, 1, tmp, pid))
                rates["workers 2"].append(await run_pool(single.url, n, 2, tmp, pid))
                rates["hand loop"].append(await hand_loop(single.url, n, tmp))
        ratios = [b / a for a, b in zip(rates["workers 1"], rates["workers 2"], strict=True)]
        print(f"consume block (zstd best + msgpack decode + Parquet parts), {n} records, {args.rounds} rounds, "
              "steady state:")
        for name, values in rates.items():
            print(f"  {name:10s} {statistics.median(values):>10,.0f} records/s (median; rounds: "
                  f"{', '.join(f'{v:,.0f}' for v in values)})")
        print(f"  workers 2 / workers 1: {statistics.median(ratios):.2f}x median [{min(ratios):.2f}-{max(ratios):.2f}] "
              "(at most the ceiling below)")
        hand = [a / b for a, b in zip(rates["workers 1"], rates["hand loop"], strict=True)]
        print(f"  workers 1 / hand loop: {statistics.median(hand):.2f}x median [{min(hand):.2f}-{max(hand):.2f}]")
        breakdown(usable_cores())
        one = statistics.median(rates["workers 1"])
        pools = RUNS["workers 2"]
        ceiling = statistics.median([r.ceiling for r in pools])
        of_ceiling = [r.rate / r.ceiling for r in pools]
        print(f"  ceiling of --workers 2 on {usable_cores()} cores at these costs, less the "
              f"{statistics.median([r.others for r in pools]):.2f} cores the rest of the machine kept busy: "
              f"{ceiling:,.0f} records/s = {ceiling / one:.2f}x workers 1 (measured "
              f"{statistics.median(rates['workers 2']) / one:.2f}x); the pool at {statistics.median(of_ceiling):.2f} "
              f"of it [{min(of_ceiling):.2f}-{max(of_ceiling):.2f}] (target >= 0.95)")
        figures["ceiling_workers_2"] = ceiling
        figures["workers_2_of_ceiling"] = statistics.median(of_ceiling)
        figures["rounds"] = {name: [{"rate": r.rate, "ceiling": r.ceiling, "of_ceiling": r.rate / r.ceiling,
                                     "worker_us": r.worker_us, "server_us": r.server_us, "share": r.share,
                                     "waited": r.waited, "idle": r.slept, "others": r.others} for r in runs]
                             for name, runs in RUNS.items()}
        figures["load_average"] = os.getloadavg()
        print(f"  load average (1, 5, 15 min) at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
        figures.update({k.replace(" ", "_"): statistics.median(v) for k, v in rates.items()})
        figures["ratio_workers_2_over_1"] = statistics.median(ratios)
        figures["publish_r1"] = publish_r1
        if not args.no_cluster:
            with LocalCluster(3, store_dir=tmp / "cluster") as cluster:
                publish_r3 = await fill(cluster.url, n, payloads, 3)
                r3 = [await run_pool(cluster.url, n, 2, tmp, None) for _ in range(args.rounds)]
            print(f"3-node cluster, R3 stream, --workers 2: {max(r3):,.0f} records/s consumed "
                  f"({max(r3) / max(rates['workers 2']):.2f}x one server R1)")
            print(f"publish with acks (publish_async, window 2000): R3 {publish_r3:,.0f} records/s vs "
                  f"R1 {publish_r1:,.0f} ({publish_r3 / publish_r1:.2f}x)")
            figures.update({"workers_2_r3": max(r3), "publish_r3": publish_r3})
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
