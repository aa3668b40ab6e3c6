"""JetStream publish pipeline vs a hand-written nats-py ``publish_async`` loop with the same window.

Both: generate point records, msgpack, zstd level 1, publish with Content-Type,
Content-Encoding, Wirepipe-Sent-At and a Nats-Msg-Id per record into a file-backed
stream, at most ``--window`` unacknowledged, and wait until every ack is in. Each round
publishes into a fresh stream. A paced pass with a subscriber process gives latency.

    python benchmarks/jetstream_publish.py [--count 100000] [--rounds 5] [--window 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time

from natsbench import finish_subscriber, interleave, paced_points, report, start_subscriber
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.nats.jetstream_sink import JetStreamSink
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.operators.compress import Compress
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.wire import Header

_ids = itertools.count()


async def fresh_stream(url: str) -> str:
    import nats

    name = f"BENCH{next(_ids)}"
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name=name, subjects=[f"js.{name}"])
    await nc.close()
    return name


async def wirepipe_run(url: str, n: int, window: int, rate: float | None = None,
                       stream: str | None = None) -> tuple[int, int]:
    stream = stream or await fresh_stream(url)
    sink = JetStreamSink(f"js.{stream}", url=url, window=window)
    stats = await Pipeline(GenerateSource("point", count=n, batch_size=1000, rate=rate),
                           [Serialize("msgpack"), Compress("zstd", "fastest")], sink,
                           flush_interval=3600).run_async()
    assert sink.acked == n, sink.acked
    return stats.records_out, sink.bytes


async def hand_run(url: str, n: int, window: int, rate: float | None = None,
                   stream: str | None = None) -> tuple[int, int]:
    import msgpack
    import nats
    import zstandard

    stream = stream or await fresh_stream(url)
    subject = f"js.{stream}"
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=window)
    pack = msgpack.Packer(use_bin_type=True).pack
    compress = zstandard.ZstdCompressor(level=1).compress
    base = {Header.CONTENT_TYPE: "application/msgpack", Header.CONTENT_ENCODING: "zstd"}
    nbytes = 0
    seq = 0
    async for chunk in paced_points(n, rate):
        for rec in chunk:
            payload = compress(pack(rec))
            nbytes += len(payload)
            await js.publish_async(subject, payload, headers={**base, Header.SENT_AT: str(time.time_ns()),
                                                             Header.MSG_ID: f"hand-{seq}"})
            seq += 1
    await asyncio.wait_for(js.publish_async_completed(), 60)
    await nc.close()
    return n, nbytes


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--rate", type=float, default=10_000, help="paced rate of the latency pass")
    args = ap.parse_args()
    n, w = args.count, args.window
    async with EmbeddedServer() as srv:
        url = srv.url
        results = await interleave(args.rounds, {
            "wirepipe pipeline": lambda: wirepipe_run(url, n, w),
            "hand-written publish_async loop": lambda: hand_run(url, n, w),
        })
        m = int(args.rate * 2)
        for name, run in (("wirepipe pipeline", wirepipe_run), ("hand-written publish_async loop", hand_run)):
            stream = await fresh_stream(url)
            sub = start_subscriber(url, f"js.{stream}", m)
            await run(url, m, w, args.rate, stream)
            results[name].latency = finish_subscriber(sub)
    report(f"JetStream publish (file storage), point -> msgpack -> zstd:fastest, window {w}, {n:,} records x "
           f"{args.rounds} rounds (latency pass paced at {args.rate:,.0f} msg/s)", results, "wirepipe pipeline",
           "hand-written publish_async loop")


if __name__ == "__main__":
    asyncio.run(main())
