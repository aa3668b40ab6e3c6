"""Typed, framed ``point`` records end to end over core NATS: wirepipe against the same work written by hand.

    publisher process:  source -> pack 100 -> serialize bincode (schema point) -> core NATS
    consumer process:   core NATS -> deserialize bincode framed -> unpack -> null

Both wirepipe processes record their metrics to Parquet; the script reads them back and names the
bottleneck: the process whose stages were busy the larger share of its run, and the stage that took most
of that time. The hand-written equivalent runs in the same run, interleaved: a publisher that packs 100
records into one message with numpy (``u64`` count + the ``<i4, <i4`` rows, the bytes bincode writes) and
``nc.publish``, and a callback consumer that reads them back with ``numpy.frombuffer`` into the same dicts.

The source is ``--source prebuilt`` (default: the records exist before the clock starts, 200,000 distinct
ones cycled, as a replay or an upstream stage hands them over; both sides take the same lists) or
``generate`` (wirepipe's ``generate`` source against the dataset's generator called by hand).

End to end: records received / (consumer's last record - publisher's start), wall clock on one machine.
Each side's own rate and CPU seconds per million records are printed too. Every round starts a fresh
publisher and consumer process per variant, in a rotating order; figures are medians over rounds, the
ratio the median of per-round ratios.

    python benchmarks/bench_framed_e2e.py [--count 4000000] [--rounds 3] [--per-message 100] [--source prebuilt|generate]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUBJECT = "bench.framed"
DISTINCT = 200_000  # prebuilt records: this many distinct ones, cycled
HAND = "hand-written"
HEADERS = "wire"  # the publisher's headers: wire (Content-Type and the stamps) or none (--headers)
BATCH = 100  # the consumer's batch: messages (of --per-message records each) taken at once (--consumer-batch)


def _batches(n: int, source: str) -> Any:
    """The records as lists of 1000: prebuilt (made now, cycled) or made while iterating (the generator)."""
    from wirepipe.datasets import get_dataset

    point = get_dataset("point")
    if source == "generate":
        return point.records(n, 0, 1000)
    distinct = list(point.records(min(n, DISTINCT), 0, 1000))
    return [distinct[i % len(distinct)] for i in range(-(-n // 1000))]


# --- wirepipe ------------------------------------------------------------------------------------------


async def wirepipe_publisher(url: str, n: int, k: int, source: str, metrics: str) -> dict[str, Any]:
    from wirepipe.connectors.generate import GenerateSource
    from wirepipe.connectors.nats.core_sink import NatsSink
    from wirepipe.operators.pack import Pack
    from wirepipe.operators.serialize import Serialize
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSource

    src: Any = GenerateSource("point", count=n, batch_size=1000) if source == "generate" else \
        TestingSource.from_batches(_batches(n, source))
    pipe = Pipeline(src, [Pack(k), Serialize("bincode", schema="point")], NatsSink(SUBJECT, url=url, headers=HEADERS),
                    name="framed-publisher", metrics=metrics, flush_interval=3600)
    return await _timed(pipe.run_async, lambda stats: stats.records_in)


async def wirepipe_consumer(url: str, n: int, k: int, metrics: str) -> dict[str, Any]:
    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.connectors.null import NullSink
    from wirepipe.operators.deserialize import Deserialize
    from wirepipe.operators.unpack import Unpack
    from wirepipe.pipelines.pipeline import Pipeline

    class LastWrite(NullSink):
        first = last = 0.0

        async def write(self, batch: Any) -> None:
            await super().write(batch)
            self.last = time.time()
            self.first = self.first or self.last

    messages = -(-n // k)
    source = NatsSource(SUBJECT, url=url, count=messages, pending_msgs_limit=messages + 10, pending_bytes_limit=0,
                        batch_size=BATCH)
    sink = LastWrite()
    pipe = Pipeline(source, [Deserialize("bincode", schema="point", framed=True), Unpack()], sink,
                    name="framed-consumer", metrics=metrics, flush_interval=3600)
    task = asyncio.ensure_future(pipe.run_async())
    while not source.ready.is_set():
        await asyncio.sleep(0.005)
    print("ready", flush=True)
    cpu = time.process_time()
    stats = await task
    return {"records": stats.records_out, "first": sink.first, "last": sink.last, "cpu": time.process_time() - cpu,
            "lost": n - stats.records_out}


async def _timed(run: Any, records: Any) -> dict[str, Any]:
    cpu, start = time.process_time(), time.time()
    stats = await run()
    return {"records": records(stats), "start": start, "end": time.time(), "cpu": time.process_time() - cpu}


# --- by hand -------------------------------------------------------------------------------------------


async def hand_publisher(url: str, n: int, k: int, source: str) -> dict[str, Any]:
    import nats
    import numpy as np

    batches = _batches(n, source)
    dtype = np.dtype([("x", "<i4"), ("y", "<i4")])
    from wirepipe.wire import Header

    headers = {Header.CONTENT_TYPE: "application/vnd.wirepipe.bincode"} if HEADERS == "wire" else None

    async def run() -> int:
        nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
        sent = 0
        for chunk in batches:
            for i in range(0, len(chunk), k):
                part = chunk[i:i + k]
                rows = np.fromiter(((r["x"], r["y"]) for r in part), dtype=dtype, count=len(part))
                await nc.publish(SUBJECT, len(part).to_bytes(8, "little") + rows.tobytes(), headers=headers)
                sent += len(part)
        await nc.flush(timeout=60)
        await nc.close()
        return sent

    return await _timed(run, lambda sent: sent)


async def hand_consumer(url: str, n: int, k: int) -> dict[str, Any]:
    import nats
    import numpy as np

    dtype = np.dtype([("x", "<i4"), ("y", "<i4")])
    got = 0
    first = last = 0.0
    done = asyncio.Event()
    messages = -(-n // k)

    async def on_msg(msg: Any) -> None:
        nonlocal got, first, last
        data = msg.data
        rows = np.frombuffer(data, dtype=dtype, count=int.from_bytes(data[:8], "little"), offset=8)
        records = [{"x": x, "y": y} for x, y in zip(rows["x"].tolist(), rows["y"].tolist(), strict=True)]
        got += len(records)
        last = time.time()
        first = first or last
        if got >= n:
            done.set()

    nc = await nats.connect(url)
    await nc.subscribe(SUBJECT, cb=on_msg, pending_msgs_limit=messages + 10, pending_bytes_limit=0)
    await nc.flush()
    print("ready", flush=True)
    cpu = time.process_time()
    progress, since = -1, time.monotonic()
    while not done.is_set() and time.monotonic() - since < 10:  # core NATS may drop: stop once nothing moves
        if got != progress:
            progress, since = got, time.monotonic()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), 0.5)
    await nc.close()
    return {"records": got, "first": first, "last": last, "cpu": time.process_time() - cpu, "lost": n - got}


# --- the run ---------------------------------------------------------------------------------------------


def _child(argv: list[str]) -> None:
    global HEADERS, BATCH
    role, variant, url, n, k, source, metrics = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5], argv[6]
    HEADERS, BATCH = argv[7], int(argv[8])
    import nats  # noqa: F401  (imports before the clock: the interpreter's start is not counted)
    import numpy  # noqa: F401

    if variant == "wirepipe":
        import wirepipe.connectors.nats.core_sink
        import wirepipe.connectors.nats.core_source
        import wirepipe.pipelines.pipeline  # noqa: F401
        from wirepipe.core.allocator import keep_freed_memory

        keep_freed_memory()  # what `wirepipe run` and its workers do (a process of wirepipe's own)

    if role == "publish":
        run = wirepipe_publisher(url, n, k, source, metrics) if variant == "wirepipe" else \
            hand_publisher(url, n, k, source)
    else:
        run = wirepipe_consumer(url, n, k, metrics) if variant == "wirepipe" else hand_consumer(url, n, k)
    print(json.dumps(asyncio.run(run)), flush=True)


def one_round(variant: str, url: str, n: int, k: int, source: str, folder: Path) -> dict[str, Any]:
    """A consumer process, then a publisher process; both sides' reports and the end-to-end rate."""
    def start(role: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, __file__, "child", role, variant, url, str(n), str(k), source,
                                 str(folder / role), HEADERS, str(BATCH)], stdout=subprocess.PIPE, text=True)

    consumer = start("consume")
    assert consumer.stdout is not None
    assert consumer.stdout.readline().strip() == "ready"
    publisher = start("publish")
    pub_out, _ = publisher.communicate(timeout=600)
    con_out, _ = consumer.communicate(timeout=600)
    pub = json.loads(pub_out.strip().splitlines()[-1])
    con = json.loads(con_out.strip().splitlines()[-1])
    return {"publisher": pub, "consumer": con, "e2e": con["records"] / (con["last"] - pub["start"]),
            "pub_rate": pub["records"] / (pub["end"] - pub["start"]),
            "con_rate": con["records"] / max(con["last"] - con["first"], 1e-9)}


def bottleneck(folder: Path) -> str:
    """From the metrics Parquet of both processes: each one's busy share of its run, and its largest stages."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    lines = []
    for role, who in (("publish", "publisher"), ("consume", "consumer")):
        table = pq.read_table(folder / role)
        took = pc.subtract(table["end_ns"], table["start_ns"])
        span = (pc.max(table["end_ns"]).as_py() - pc.min(table["start_ns"]).as_py()) or 1
        per_stage: dict[str, int] = {}
        for stage, op, ns in zip(table["stage"].to_pylist(), table["operator"].to_pylist(), took.to_pylist(),
                                 strict=True):
            per_stage[f"{stage} ({op})"] = per_stage.get(f"{stage} ({op})", 0) + ns
        busy = sum(per_stage.values())
        top = sorted(per_stage.items(), key=lambda kv: -kv[1])
        lines.append((busy / span, f"{who}: stages busy {busy / span:.0%} of its {span / 1e9:.2f} s; "
                      + ", ".join(f"{name} {ns / 1e9:.2f} s" for name, ns in top)))
    lines.sort(key=lambda x: -x[0])
    return "\n".join(["bottleneck (busiest process first, from its metrics Parquet; a source stage's time includes "
                      "waiting for records, and nats-py's parsing of what arrives runs while it waits; stages of "
                      "consecutive batches overlap):"] + [f"  {t}" for _, t in lines])


def main() -> None:
    global HEADERS, BATCH
    from wirepipe.connectors.nats.server import EmbeddedServer
    from wirepipe.core.table import Table

    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-message", type=int, default=100)
    ap.add_argument("--source", choices=["prebuilt", "generate"], default="prebuilt")
    ap.add_argument("--headers", choices=["wire", "none"], default="wire",
                    help="wirepipe's headers: wire (Content-Type, Wirepipe-Publisher/Seq/Sent-At) or none")
    ap.add_argument("--consumer-batch", type=int, default=100, help="messages the consumer takes per batch")
    args = ap.parse_args()
    HEADERS, BATCH = args.headers, args.consumer_batch
    n, k = args.count, args.per_message
    variants = ["wirepipe", HAND]
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with EmbeddedServer() as srv, tempfile.TemporaryDirectory() as tmp:
        for v in variants:  # warm-up, not recorded
            one_round(v, srv.url, max(k, n // 20), k, args.source, Path(tmp) / f"warm-{v}")
        for r in range(args.rounds):
            for v in (variants if r % 2 == 0 else variants[::-1]):
                results[v].append(one_round(v, srv.url, n, k, args.source, Path(tmp) / f"{v}-{r}"))
        last = Path(tmp) / f"wirepipe-{args.rounds - 1}"
        where = bottleneck(last)

    def med(v: str, key: str) -> float:
        return statistics.median(x[key] for x in results[v])

    def cpu(v: str, side: str) -> float:
        return statistics.median(x[side]["cpu"] / x[side]["records"] * 1e6 for x in results[v] if x[side]["records"])

    rows = [[v, f"{med(v, 'e2e'):,.0f}", f"{min(x['e2e'] for x in results[v]):,.0f}-{max(x['e2e'] for x in results[v]):,.0f}",
             f"{med(v, 'pub_rate'):,.0f}", f"{med(v, 'con_rate'):,.0f}", f"{cpu(v, 'publisher'):.2f}",
             f"{cpu(v, 'consumer'):.2f}", f"{sum(x['consumer']['lost'] for x in results[v]):,}"] for v in variants]
    print()
    print(Table(f"point, {args.source} source -> pack {k} -> bincode -> core NATS -> bincode framed -> unpack -> null, "
                f"{n:,} records x {args.rounds} rounds (publisher and consumer: processes of their own)",
                ["variant", "end to end rec/s (median)", "range", "publisher rec/s", "consumer rec/s",
                 "publisher CPU us/rec", "consumer CPU us/rec", "lost"], rows).text(elsewhere=None), end="")
    ratios = [a["e2e"] / b["e2e"] for a, b in zip(results["wirepipe"], results[HAND], strict=True)]
    print(f"ratio wirepipe / hand-written, end to end: {statistics.median(ratios):.2f} "
          f"({min(ratios):.2f}-{max(ratios):.2f}); target: wirepipe >= 1,500,000 records/s end to end")
    print(where)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    _child(sys.argv[2:])
elif __name__ == "__main__":
    main()
