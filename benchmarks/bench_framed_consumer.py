"""The typed framed consumer's CPU a record, in process and without a server: ``bench_framed_e2e.py``'s
consumer side, steadier than the end-to-end run on a shared machine.

    wirepipe:      the frames a core NATS subscription receives -> NatsSource (take, headers parsed, loss
                   accounting) -> deserialize bincode framed (schema check) -> unpack -> null, metrics on
    hand-written:  the end-to-end pair's callback body over the same payloads: ``numpy.frombuffer`` and the
                   same dicts, per message

The frames are the bytes nats-server delivers for ``bench_framed_e2e.py``'s publisher (``point`` records,
``pack 100``, bincode with the schema, the wire headers with a ``Wirepipe-Seq`` a message): built here with
the sink's own header encoder (``connectors/nats/frames.py``) and handed to the source's subscription buffer
as its parser would. What this leaves out on both sides is the socket and nats-py's parsing of it (the
hand-written consumer's ``Msg`` and callback a message; wirepipe's parser fast path). Each round is a fresh
process per variant, in a rotating order; the figures are the medians of the rounds' CPU seconds (the whole
process, every thread; wirepipe's from its source's start, as the end-to-end run counts its consumer's, to the
end of the run, the metrics' Parquet written) a record, with their ranges.

    python benchmarks/bench_framed_consumer.py [--count 4000000] [--rounds 5] [--consumer-batch 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

SUBJECT = "bench.framed"
PER_MESSAGE = 100
DISTINCT = 200_000  # as bench_framed_e2e.py's prebuilt source: this many distinct records, cycled
HAND = "hand-written"


def frames(n: int) -> list[tuple[bytes, bytes, bytes, bytes]]:
    """``n`` records as the subscription receives them: (reply, payload, header block, subject) a message."""
    from wirepipe.connectors.nats.frames import SEQ_LINE, stamped_head
    from wirepipe.core.batch import Batch
    from wirepipe.datasets import get_dataset
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.serialize import Serialize
    from wirepipe.wire import header_lines

    distinct = list(get_dataset("point").records(min(n, DISTINCT), 0, 1000))
    chunks = [distinct[i % len(distinct)] for i in range(-(-n // 1000))]
    pack, serialize = Pack(PER_MESSAGE), Serialize("bincode", schema="point")
    out = []
    seq = 0
    sent_at = time.time_ns()
    for chunk in chunks:
        batch = serialize(pack(Batch(chunk)))
        shared = header_lines(batch.headers)  # type: ignore[arg-type]  # one dict for the batch
        assert shared is not None
        head = stamped_head(shared, "bench0000001", sent_at)  # a chunk's send time, as the sink stamps it
        for payload in batch.values:
            seq += 1
            out.append((b"", payload, b"%b%b%d\r\n\r\n" % (head, SEQ_LINE, seq), SUBJECT.encode()))
    return out


async def wirepipe_consumer(got: list[tuple[bytes, bytes, bytes, bytes]], batch: int, metrics: str) -> dict[str, Any]:
    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.connectors.null import NullSink
    from wirepipe.operators.deserialize import Deserialize
    from wirepipe.operators.unpack import Unpack
    from wirepipe.pipelines.pipeline import Pipeline

    class Received(NatsSource):
        """The core NATS source, its subscription's buffer filled as the parser fills it; no connection."""

        opened = 0.0

        async def open(self) -> None:
            self.buffer.items.extend(got)
            self.buffer.received += len(got)
            self.ready.set()
            self.opened = time.process_time()  # the end-to-end run's clock starts here too (its consumer is ready)

        async def close(self) -> None:
            self.buffer.drop_messages()

    source = Received(SUBJECT, url="nats://127.0.0.1:1", count=len(got), pending_msgs_limit=len(got) + 10,
                      pending_bytes_limit=0, batch_size=batch)
    pipe = Pipeline(source, [Deserialize("bincode", schema="point", framed=True), Unpack()], NullSink(),
                    name="framed-consumer", metrics=metrics, flush_interval=3600)
    stats = await pipe.run_async()
    return {"records": stats.records_out, "cpu": time.process_time() - source.opened, "lost": source.lost}


def hand_consumer(got: list[tuple[bytes, bytes, bytes, bytes]]) -> dict[str, Any]:
    import numpy as np

    dtype = np.dtype([("x", "<i4"), ("y", "<i4")])
    records = 0
    cpu = time.process_time()
    for _, data, _, _ in got:
        rows = np.frombuffer(data, dtype=dtype, count=int.from_bytes(data[:8], "little"), offset=8)
        out = [{"x": x, "y": y} for x, y in zip(rows["x"].tolist(), rows["y"].tolist(), strict=True)]
        records += len(out)
    return {"records": records, "cpu": time.process_time() - cpu, "lost": 0}


def _child(variant: str, n: int, batch: int) -> None:
    if variant == "wirepipe":
        from wirepipe.core.allocator import keep_freed_memory

        keep_freed_memory()  # what `wirepipe run` and its workers do (a process of wirepipe's own)
    got = frames(n)
    if variant == "wirepipe":
        with tempfile.TemporaryDirectory() as tmp:
            result = asyncio.run(wirepipe_consumer(got, batch, f"{tmp}/metrics"))
    else:
        result = hand_consumer(got)
    print(json.dumps(result), flush=True)


def main() -> None:
    from wirepipe.core.table import Table

    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--consumer-batch", type=int, default=100, help="messages the consumer takes per batch")
    args = ap.parse_args()
    variants = ["wirepipe", HAND]
    per_record: dict[str, list[float]] = {v: [] for v in variants}
    lost = 0
    for r in range(args.rounds):
        for v in variants[r % 2:] + variants[:r % 2]:
            out = subprocess.run([sys.executable, __file__, "child", v, str(args.count), str(args.consumer_batch)],
                                 capture_output=True, text=True, check=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            assert result["records"] == args.count, result
            lost += result["lost"]
            per_record[v].append(result["cpu"] / result["records"] * 1e6)

    def cell(v: str) -> str:
        xs = per_record[v]
        return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"

    print(Table(f"framed consumer in process: {args.count:,} point records, {PER_MESSAGE} a message, "
                f"{args.consumer_batch} messages a batch, {args.rounds} rounds",
                ["variant", "CPU us/record, median (range)"], [[v, cell(v)] for v in variants]).text(elsewhere=None),
          end="")
    print(f"records lost (loss accounting): {lost}")


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif __name__ == "__main__":
    main()
