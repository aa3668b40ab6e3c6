"""Publish pipeline ``generate point -> msgpack -> zstd -> core NATS`` vs a hand-written nats-py loop.

Both generate the same records, pack them with msgpack, compress with zstd (level 1,
wirepipe's ``fastest``), and publish with the same headers (Content-Type,
Content-Encoding, Wirepipe-Sent-At stamped per record). Throughput rounds run without a
subscriber (publisher speed, like ``nats bench pub``); a paced pass with a subscriber
process measures latency from Wirepipe-Sent-At to receipt.

``--subjects`` picks the subjects: ``fixed`` (one, ``bench.pub``), ``field`` (one per record from
a field, ``bench.pub.{x}``: about 200 distinct subjects, as ``orders.{region}`` gives) or ``seq``
(``bench.pub.{seq}``: a new subject for every record, the worst case of the sink's subject check).
The pipeline renders them with a ``subject`` operator, the hand loop with an f-string. The
script then times the sink's subject check alone (``wire.SubjectCheck``) over the same subject
columns, batch by batch, and prints it per record and as a share of wirepipe's publish time.

    python benchmarks/nats_publish.py [--count 200000] [--rounds 5] [--subjects fixed|field|seq]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from natsbench import finish_subscriber, interleave, paced_points, report, start_subscriber
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.operators.compress import Compress
from wirepipe.operators.route import Subject
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.wire import Header, SubjectCheck, subject_room

TEMPLATES = {"fixed": "", "field": ".{x}", "seq": ".{seq}"}


def pipeline(url: str, n: int, subject: str, rate: float | None = None, subjects: str = "fixed") -> Pipeline:
    if subjects == "fixed":
        return Pipeline(GenerateSource("point", count=n, batch_size=1000, rate=rate),
                        [Serialize("msgpack"), Compress("zstd", "fastest")],
                        NatsSink(subject, url=url), flush_interval=3600)
    return Pipeline(GenerateSource("point", count=n, batch_size=1000, rate=rate),
                    [Subject(subject + TEMPLATES[subjects]), Serialize("msgpack"), Compress("zstd", "fastest")],
                    NatsSink("{subject}", url=url), flush_interval=3600)


async def hand_loop(url: str, n: int, subject: str, rate: float | None = None,
                    subjects: str = "fixed") -> tuple[int, int]:
    import msgpack
    import nats
    import zstandard

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


def subject_check_us(n: int, subjects: str) -> float:
    """Microseconds per record the sink's subject check takes over the columns this mode publishes
    (best of three passes, a new check each pass, as a new sink starts)."""
    from wirepipe.datasets import get_dataset

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


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=float, default=20_000, help="paced rate of the latency pass")
    ap.add_argument("--subjects", choices=list(TEMPLATES), default="fixed",
                    help="one subject, one per record from a field (~200 distinct), or a new one per record")
    args = ap.parse_args()
    n = args.count
    mode = args.subjects
    async with EmbeddedServer() as srv:
        url = srv.url

        async def wp() -> tuple[int, int]:
            pipe = pipeline(url, n, "bench.pub", subjects=mode)
            stats = await pipe.run_async()
            return stats.records_out, pipe.sink.bytes

        results = await interleave(args.rounds, {
            "wirepipe pipeline": wp,
            "hand-written nats-py loop": lambda: hand_loop(url, n, "bench.pub", subjects=mode),
        })
        m = int(args.rate * 2)
        for name, run in (("wirepipe pipeline", lambda: pipeline(url, m, "bench.lat", args.rate, mode).run_async()),
                          ("hand-written nats-py loop", lambda: hand_loop(url, m, "bench.lat", args.rate, mode))):
            sub = start_subscriber(url, "bench.lat" if mode == "fixed" else "bench.lat.>", m)
            await run()
            results[name].latency = finish_subscriber(sub)
    report(f"core NATS publish ({mode} subjects), point -> msgpack -> zstd:fastest, {n:,} records x {args.rounds} rounds "
           f"(latency pass paced at {args.rate:,.0f} msg/s)", results, "wirepipe pipeline", "hand-written nats-py loop")
    check = subject_check_us(n, mode)
    publish = 1e6 / results["wirepipe pipeline"].best
    print(f"subject check: {check:.3f} us per record, {check / publish:.1%} of wirepipe's {publish:.2f} us per record")


if __name__ == "__main__":
    asyncio.run(main())
