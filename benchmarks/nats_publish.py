"""Publish pipeline ``generate point -> msgpack -> zstd -> core NATS`` vs a hand-written nats-py loop.

Both generate the same records, pack them with msgpack, compress with zstd (level 1,
wirepipe's ``fastest``), and publish with the same headers (Content-Type,
Content-Encoding, Wirepipe-Sent-At stamped per record). Throughput rounds run without a
subscriber (publisher speed, like ``nats bench pub``); a paced pass with a subscriber
process measures latency from Wirepipe-Sent-At to receipt.

    python benchmarks/nats_publish.py [--count 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from natsbench import SENT_AT, finish_subscriber, interleave, paced_points, report, start_subscriber
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.core_sink import NatsSink
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.operators.compress import Compress
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.wire import Header


def pipeline(url: str, n: int, subject: str, rate: float | None = None) -> Pipeline:
    return Pipeline(GenerateSource("point", count=n, batch_size=1000, rate=rate),
                    [Serialize("msgpack"), Compress("zstd", "fastest")],
                    NatsSink(subject, url=url), flush_interval=3600)


async def hand_loop(url: str, n: int, subject: str, rate: float | None = None) -> tuple[int, int]:
    import msgpack
    import nats
    import zstandard

    nc = await nats.connect(url)
    pack = msgpack.Packer(use_bin_type=True).pack
    compress = zstandard.ZstdCompressor(level=1).compress
    headers = {Header.CONTENT_TYPE.value: "application/msgpack", Header.CONTENT_ENCODING.value: "zstd"}
    nbytes = 0
    async for chunk in paced_points(n, rate):
        for rec in chunk:
            payload = compress(pack(rec))
            nbytes += len(payload)
            await nc.publish(subject, payload, headers={**headers, SENT_AT: str(time.time_ns())})
    await nc.flush()
    await nc.close()
    return n, nbytes


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=float, default=20_000, help="paced rate of the latency pass")
    args = ap.parse_args()
    n = args.count
    async with EmbeddedServer() as srv:
        url = srv.url

        async def wp() -> tuple[int, int]:
            pipe = pipeline(url, n, "bench.pub")
            stats = await pipe.run_async()
            return stats.records_out, pipe.sink.bytes

        results = await interleave(args.rounds, {
            "wirepipe pipeline": wp,
            "hand-written nats-py loop": lambda: hand_loop(url, n, "bench.pub"),
        })
        m = int(args.rate * 2)
        for name, run in (("wirepipe pipeline", lambda: pipeline(url, m, "bench.lat", args.rate).run_async()),
                          ("hand-written nats-py loop", lambda: hand_loop(url, m, "bench.lat", args.rate))):
            sub = start_subscriber(url, "bench.lat", m)
            await run()
            results[name].latency = finish_subscriber(sub)
    report(f"core NATS publish, point -> msgpack -> zstd:fastest, {n:,} records x {args.rounds} rounds "
           f"(latency pass paced at {args.rate:,.0f} msg/s)", results, "wirepipe pipeline", "hand-written nats-py loop")


if __name__ == "__main__":
    asyncio.run(main())
