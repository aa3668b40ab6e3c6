"""Scaling out: records/s of ``wirepipe run --workers 2`` vs ``--workers 1``, and of a 3-node R3 cluster vs one server.

The pipeline is CPU-heavy on the consume side: ``block`` records (10.8 kB msgpack, 3.7 kB after
zstd best) from a JetStream stream through one shared durable, zstd decompress + msgpack decode,
written as Parquet part files, acked after each part is complete. Both pool sizes run as a real
supervisor (``Pool``) with real worker processes, alternately, in one run; the rate is the
steady state between 10% and 90% of the stream written (process start-up and the tail excluded).
A hand-written single-process loop (nats-py fetch + ack, zstd, msgpack, pyarrow) doing the
same work is measured in the same run, for scale.

The cluster part fills an R3 stream on a local 3-node cluster and an R1 stream on one server
(publish rate with acks: the cost of replication) and consumes both with ``--workers 2``.

    python benchmarks/bench_workers.py [--count 40000] [--rounds 2] [--no-cluster]

On a 2-core machine the target is ``--workers 2`` >= 1.6x ``--workers 1``; figures swing with
anything else running on the machine (run it on a quiet one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wirepipe.connectors.nats.server import EmbeddedServer, LocalCluster
from wirepipe.datasets import get_dataset
from wirepipe.pipelines.pool import Pool, RestartPolicy, usable_cores
from wirepipe.plan.capacity import measure_costs, predict_rate
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
    """A fresh stream with n records (publish_async windows, each awaited); returns records/s."""
    import nats

    nc = await nats.connect(url.split(","))
    js = nc.jetstream()
    with contextlib.suppress(Exception):  # it may not exist
        await js.delete_stream(STREAM)
    await js.add_stream(name=STREAM, subjects=[SUBJECT], num_replicas=replicas)
    headers = {Header.CONTENT_TYPE: "application/msgpack", Header.CONTENT_ENCODING: "zstd"}
    t0 = time.perf_counter()
    window: list[Any] = []
    for i in range(n):
        window.append(await js.publish_async(SUBJECT, payloads[i % len(payloads)],
                                             headers={**headers, Header.MSG_ID: str(i)}))
        if len(window) >= 2000:
            await asyncio.gather(*window)
            window = []
    await asyncio.gather(*window)
    rate = n / (time.perf_counter() - t0)
    assert (await js.stream_info(STREAM)).state.messages == n
    await nc.close()
    return rate


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


CPU: dict[str, list[float]] = {}  # CPU microseconds per record of the worker processes (start-up included)


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # ended and reaped children: the pool's workers
    return ru.ru_utime + ru.ru_stime


async def run_pool(url: str, n: int, workers: int, tmp: Path) -> float:
    """Steady-state records/s of an N-worker pool over a fresh durable (10% to 90% of n written)."""
    out = tmp / f"out-{workers}-{next(_round)}"
    cpu0 = children_cpu()
    pool = Pool(pipeline(url, out, f"bench{next(_round)}"), workers, restart=RestartPolicy(max_failures=1),
                echo=lambda _line: None)
    task = asyncio.ensure_future(pool.run())
    marks: dict[float, float] = {}
    while not task.done():
        done = pool.total().get("records_out", 0)
        for frac in (0.1, 0.9):
            if frac not in marks and done >= frac * n:
                marks[frac] = time.perf_counter()
        if done >= n:
            pool.stop()
            break
        await asyncio.sleep(0.02)
    code = await task
    CPU.setdefault(f"workers {workers}", []).append((children_cpu() - cpu0) / n * 1e6)
    shutil.rmtree(out, ignore_errors=True)
    if code != 0 or len(marks) < 2 or marks[0.9] <= marks[0.1]:
        raise SystemExit(f"pool of {workers} failed (exit {code}, {pool.gave_up or 'no reason'}, marks {marks})")
    return 0.8 * n / (marks[0.9] - marks[0.1])


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


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=40000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON (wirepipe plan --bench reads it)")
    args = ap.parse_args()
    n = args.count
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    payloads = encoded_blocks()
    cores = usable_cores()
    costs = measure_costs("block", "msgpack|zstd:best", sink="parquet")  # the capacity model's inputs
    figures: dict[str, Any] = {"count": n, "record_bytes_wire": statistics.mean(len(p) for p in payloads)}
    try:
        with EmbeddedServer(store_dir=tmp / "single") as single:
            publish_r1 = await fill(single.url, n, payloads, 1)
            rates: dict[str, list[float]] = {"workers 1": [], "workers 2": [], "hand loop": []}
            for _ in range(args.rounds):  # interleaved, so contention hits every variant alike
                rates["workers 1"].append(await run_pool(single.url, n, 1, tmp))
                rates["workers 2"].append(await run_pool(single.url, n, 2, tmp))
                rates["hand loop"].append(await hand_loop(single.url, n, tmp))
        ratios = [b / a for a, b in zip(rates["workers 1"], rates["workers 2"], strict=True)]
        again = measure_costs("block", "msgpack|zstd:best", sink="parquet")
        costs = min(costs, again, key=lambda c: c.consume_total_us)  # the less disturbed of two measurements
        print(f"consume block (zstd best + msgpack decode + Parquet parts), {n} records, {args.rounds} rounds, "
              "steady state:")
        for name, values in rates.items():
            print(f"  {name:10s} {max(values):>10,.0f} records/s (best; rounds: "
                  f"{', '.join(f'{v:,.0f}' for v in values)})")
        print(f"  workers 2 / workers 1: {statistics.median(ratios):.2f}x (target >= 1.6x on 2 cores)")
        print(f"  workers 1 / hand loop: {statistics.median(rates['workers 1']) / statistics.median(rates['hand loop']):.2f}x")
        print(f"capacity model (wirepipe.plan.capacity, inputs measured in-process: {costs.consume_total_us:.0f} us/record "
              f"= decode {costs.stages['decode']:.0f} + Parquet {costs.sink_us:.0f} + pull/ack "
              f"{costs.consume_us - costs.stages['decode']:.0f}) on {cores} cores:")
        for workers in (1, 2):
            predicted = predict_rate(costs, workers, cores)
            measured = max(rates[f"workers {workers}"])
            cpu = statistics.median(CPU[f"workers {workers}"])
            print(f"  workers {workers}: predicted {predicted:>8,.0f} records/s, measured {measured:>8,.0f} "
                  f"({measured / predicted:.2f}x); worker CPU {cpu:.0f} us/record incl. start-up")
            figures[f"predicted_workers_{workers}"] = predicted
            figures[f"cpu_us_workers_{workers}"] = cpu
        figures.update({k.replace(" ", "_"): max(v) for k, v in rates.items()})
        figures["ratio_workers_2_over_1"] = statistics.median(ratios)
        figures["publish_r1"] = publish_r1
        if not args.no_cluster:
            with LocalCluster(3, store_dir=tmp / "cluster") as cluster:
                publish_r3 = await fill(cluster.url, n, payloads, 3)
                r3 = [await run_pool(cluster.url, n, 2, tmp) for _ in range(args.rounds)]
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
