"""Publish ``generate point -> msgpack -> zstd -> core NATS`` vs a hand-written nats-py loop, whole processes.

Every variant runs in a process of its own, one per round (nothing carries over from one round to the
next: no heap, no warm caches in the timing process), interleaved in one run and in a rotating order:

- ``wirepipe x1``: the pipeline ``generate point -> serialize msgpack -> compress zstd:fastest -> nats``,
  every message stamped (Content-Type, Content-Encoding, Wirepipe-Publisher, Wirepipe-Seq,
  Wirepipe-Sent-At) and the last-sequence stamps on;
- ``wirepipe x<k>`` (``--per-message``, default 10): the same with ``pack: {records: k}`` first, k records
  framed per message;
- the hand-written loop: the same records, ``msgpack.Packer().pack`` + ``ZstdCompressor(level=1).compress``
  and one ``nc.publish`` per record with the two headers a user would send (Content-Type,
  Content-Encoding) and Wirepipe-Sent-At.

Each process times its own run, from before it connects to after the final flush (its imports and the
interpreter's start are not counted), and reports its CPU seconds. Records/s are the median over rounds; the
ratios are medians of per-round ratios against the hand loop (records/s: the framed variant moves k records
per message). Throughput rounds run without a subscriber (publisher speed, like ``nats bench pub``); a paced
pass with a subscriber process measures latency from Wirepipe-Sent-At to receipt.

``--subjects`` picks the subjects: ``fixed`` (one, ``bench.pub``), ``field`` (one per record from a field,
``bench.pub.{x}``: about 200 distinct subjects, as ``orders.{region}`` gives) or ``seq`` (``bench.pub.{seq}``:
a new subject for every record, the worst case of the sink's subject check). The pipeline renders them with
a ``subject`` operator, the hand loop with an f-string. The script then times the sink's subject check alone
(``wire.SubjectCheck``) over the same subject columns and prints it per record and as a share of wirepipe's
publish time.

    python benchmarks/nats_publish.py [--count 1000000] [--rounds 5] [--per-message 10] [--subjects fixed|field|seq]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any

TEMPLATES = {"fixed": "", "field": ".{x}", "seq": ".{seq}"}
HAND = "hand-written nats-py loop"


def _pipeline(url: str, n: int, subject: str, per_message: int, rate: float | None, subjects: str) -> Any:
    from wirepipe.connectors.generate import GenerateSource
    from wirepipe.connectors.nats.core_sink import NatsSink
    from wirepipe.operators.compress import Compress
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.route import Subject
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.pipeline import Pipeline

    ops: list[Any] = [] if subjects == "fixed" else [Subject(subject + TEMPLATES[subjects])]
    if per_message > 1:
        ops.append(Pack(per_message))
    ops += [Serialize("msgpack"), Compress("zstd", "fastest")]
    return Pipeline(GenerateSource("point", count=n, batch_size=1000, rate=rate), ops,
                    NatsSink(subject if subjects == "fixed" else "{subject}", url=url), flush_interval=3600)


async def run_wirepipe(url: str, n: int, subject: str, per_message: int, rate: float | None,
                       subjects: str) -> tuple[int, int]:
    pipe = _pipeline(url, n, subject, per_message, rate, subjects)
    stats = await pipe.run_async()
    return stats.records_in, pipe.sink.bytes


async def run_hand(url: str, n: int, subject: str, rate: float | None, subjects: str) -> tuple[int, int]:
    import msgpack
    import nats
    import zstandard

    from natsbench import paced_points
    from wirepipe.wire import Header

    nc = await nats.connect(url)
    pack = msgpack.Packer(use_bin_type=True).pack
    compress = zstandard.ZstdCompressor(level=1).compress
    headers = {Header.CONTENT_TYPE: "application/msgpack", Header.CONTENT_ENCODING: "zstd"}
    nbytes = 0
    seq = 0
    async for chunk in paced_points(n, rate):
        for rec in chunk:
            payload = compress(pack(rec))
            nbytes += len(payload)
            to = subject if subjects == "fixed" else f"{subject}.{rec['x'] if subjects == 'field' else seq}"
            seq += 1
            await nc.publish(to, payload, headers={**headers, Header.SENT_AT: str(time.time_ns())})
    await nc.flush()
    await nc.close()
    return n, nbytes


def _child(argv: list[str]) -> None:
    """One variant in this process: prints its records, payload bytes, seconds and CPU seconds as JSON."""
    variant, url, n, subject, rate, subjects = argv[0], argv[1], int(argv[2]), argv[3], float(argv[4]), argv[5]
    import msgpack  # noqa: F401  (imported before the clock starts, as the interpreter's start is not counted)
    import nats  # noqa: F401
    import zstandard  # noqa: F401

    run: Any
    if variant == "hand":
        run = run_hand(url, n, subject, rate or None, subjects)
    else:
        import wirepipe.connectors.nats.core_sink
        import wirepipe.pipelines.pipeline  # noqa: F401

        run = run_wirepipe(url, n, subject, int(variant), rate or None, subjects)
    cpu, t0 = time.process_time(), time.perf_counter()
    records, nbytes = asyncio.run(run)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
    print(json.dumps({"records": records, "bytes": nbytes, "seconds": wall, "cpu": cpu}), flush=True)


def in_process(variant: str, url: str, n: int, subject: str, subjects: str, rate: float = 0.0) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "child", variant, url, str(n), subject, str(rate), subjects],
                         capture_output=True, text=True, check=True, timeout=600)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def subject_check_us(n: int, subjects: str) -> float:
    """Microseconds per record the sink's subject check takes over the columns this mode publishes
    (best of three passes, a new check each pass, as a new sink starts)."""
    from wirepipe.datasets import get_dataset
    from wirepipe.wire import SubjectCheck, subject_room

    if subjects == "fixed":
        columns: list[str | list[str]] = ["bench.pub"] * (n // 1000)
    else:
        columns, seq = [], 0
        for chunk in get_dataset("point").records(n, 0, 1000):
            columns.append([f"bench.pub.{r['x'] if subjects == 'field' else seq + i}" for i, r in enumerate(chunk)])
            seq += len(chunk)
    best = float("inf")
    for _ in range(3):
        check = SubjectCheck(subject_room(4096, 1 << 20))
        t0 = time.perf_counter()
        for col in columns:
            check.problems(col)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def main() -> None:
    from natsbench import finish_subscriber, start_subscriber
    from wirepipe.connectors.nats.server import EmbeddedServer
    from wirepipe.core.table import Table

    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-message", type=int, default=10, help="records framed per message by `pack` (1: skip)")
    ap.add_argument("--rate", type=float, default=20_000, help="paced rate of the latency pass (0: skip it)")
    ap.add_argument("--subjects", choices=list(TEMPLATES), default="fixed",
                    help="one subject, one per record from a field (~200 distinct), or a new one per record")
    args = ap.parse_args()
    n, mode = args.count, args.subjects
    variants = {"wirepipe x1": "1", HAND: "hand"}
    if args.per_message > 1:
        variants[f"wirepipe x{args.per_message}"] = str(args.per_message)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    latency: dict[str, dict[str, float]] = {}
    with EmbeddedServer() as srv:
        names = list(variants)
        for name in names:  # warm-up: the server's and the page cache's, not recorded
            in_process(variants[name], srv.url, max(1, n // 10), "bench.pub", mode)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                runs[name].append(in_process(variants[name], srv.url, n, "bench.pub", mode))
        if args.rate:
            m = int(args.rate * 2)
            for name in ("wirepipe x1", HAND):
                sub = start_subscriber(srv.url, "bench.lat" if mode == "fixed" else "bench.lat.>", m)
                in_process(variants[name], srv.url, m, "bench.lat", mode, args.rate)
                latency[name] = finish_subscriber(sub)

    def rates(name: str) -> list[float]:
        return [x["records"] / x["seconds"] for x in runs[name]]

    rows = []
    for name in variants:
        ratios = [a / b for a, b in zip(rates(name), rates(HAND), strict=True)]
        cpu_us = statistics.median(x["cpu"] / x["records"] * 1e6 for x in runs[name])
        mbps = statistics.median(x["bytes"] / x["seconds"] / 1e6 for x in runs[name])
        rows.append([name, f"{statistics.median(rates(name)):,.0f}", f"{min(rates(name)):,.0f}-{max(rates(name)):,.0f}",
                     f"{cpu_us:.2f}", f"{mbps:.1f}", f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"])
    print()
    print(Table(f"core NATS publish ({mode} subjects), point -> msgpack -> zstd:fastest, {n:,} records x {args.rounds} "
                "rounds, each run a process of its own",
                ["variant", "records/s (median)", "range", "CPU us/record", "payload MB/s", "ratio to the hand loop"],
                rows, caption="ratio: the median (min-max) of per-round ratios of records/s; targets: x1 >= 5, "
                "x10 >= 8").text(elsewhere=None), end="")
    for name, lat in latency.items():
        print(f"latency {name:<26} p50 {lat['p50_us']:>9,.0f} us  p90 {lat['p90_us']:>9,.0f} us  "
              f"p99 {lat['p99_us']:>9,.0f} us  ({lat['received']:,} received, paced at {args.rate:,.0f}/s)")
    check = subject_check_us(min(n, 200_000), mode)
    publish = statistics.median(x["seconds"] / x["records"] * 1e6 for x in runs["wirepipe x1"])
    print(f"subject check: {check:.3f} us per record, {check / publish:.1%} of wirepipe's {publish:.2f} us per record")


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    _child(sys.argv[2:])
elif __name__ == "__main__":
    main()
