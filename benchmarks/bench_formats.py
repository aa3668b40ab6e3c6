"""Typed schemas and the fixed layout, side by side in one run.

A. In process, per record (serialize + deserialize, batches of 1000, through ``run_operators``,
   the loop ``Pipeline.process_batch`` runs): msgpack and json on ``point`` and ``block`` with
   the dataset's typed schema (the msgspec engine) against the untyped path, against a
   hand-written msgspec loop doing the same work, and against the untyped libraries (msgpack-python,
   stdlib json) in a bare loop: the last ratio is what the engines give with no wirepipe around
   them. All four run in the conditions a run gives its operators: the allocator policy of
   ``wirepipe.core.allocator`` (as ``wirepipe run`` applies it; ``WIREPIPE_MALLOC=default``
   measures with glibc's default), and the collector as ``wirepipe.study.bench.timing`` has it (what
   existed at the start, the pre-generated records, frozen out of its walks). Target: typed >=
   1.3x untyped. Times are medians over the rounds (best also shown); ratios medians of
   per-round ratios. Every variant calls ``allocator.between_batches`` before each batch, as the
   run loop does (CPython's arenas kept where batches churn them): the operators through the
   harness's ``time_batches``, the hand-written loops themselves.
B. Over core NATS (publisher in its own process, consumer here, records/s from the first record
   consumed to the last): ``point`` as bincode, 100
   records framed per message, against msgpack one record per message, both wirepipe pipelines
   (generate -> [pack] -> serialize -> nats | nats -> deserialize -> [unpack] -> null).
   Target: bincode x100 >= 5x the records/s.

    python benchmarks/bench_formats.py [--rounds 5] [--count 200000] [--skip-nats] [--scale 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from typing import Any

from common import interleave, ratio
from wirepipe.core.allocator import between_batches, keep_freed_memory
from wirepipe.core.table import Table
from wirepipe.datasets import get_dataset
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.study.bench.timing import as_in_a_run, chunks, time_batches

# --- A. in process ------------------------------------------------------------------------------------


def _operators(fmt: str, schema: Any, batches: list[list[Any]]) -> Any:
    """serialize + deserialize through the timing harness (``Pipeline.process_batch`` a batch at a time); each
    batch's records let go before the next batch runs, as the pipeline drops them once the sink wrote them (and
    as the hand-written loops below do)."""
    ops = [Serialize(fmt, schema=schema), Deserialize(fmt, schema=schema)]
    count = sum(map(len, batches))

    def run() -> int:
        timed = time_batches(ops, batches, keep=False)
        assert not timed.errors, timed.errors[0]
        return count

    return run


def _as_a_run(loop: Any) -> Any:
    """``loop`` with the collector as a pipeline's run has it (``wirepipe.study.bench.timing.as_in_a_run``)."""
    def run() -> int:
        with as_in_a_run():
            return int(loop())

    return run


def _hand_msgspec(fmt: str, dataset: str, batches: list[list[Any]]) -> Any:
    """What the typed path does, written by hand: msgspec's encoder and typed decoder over a list (without the
    typed path's check that a record declares no field outside the schema: the ratio shows what it costs).

    Records past msgspec's first 512-byte buffer (a block) are written into one reused bytearray
    with ``encode_into``, as anyone tuning such a loop would (and as the engine does).
    """
    import msgspec

    from wirepipe.codecs.msgspec_engine import json_codec, msgpack_codec

    decode = (msgpack_codec if fmt == "msgpack" else json_codec)(get_dataset(dataset).schema)[1]
    if dataset != "block":  # msgspec's encoder as it is (point has no bytes to tag): no check of the record's keys
        return _bare_loop((msgspec.msgpack if fmt == "msgpack" else msgspec.json).Encoder().encode, decode, batches)

    import base64

    into = (msgspec.msgpack if fmt == "msgpack" else msgspec.json).Encoder().encode_into
    b64 = base64.b64encode

    def tagged(r: dict[str, Any]) -> dict[str, Any]:  # json: the block's bytes as {"$base64": ...}
        return {**r, "assets": [{"$base64": b64(a).decode()} for a in r["assets"]]}

    def run_block() -> int:
        n = 0
        for chunk in batches:
            between_batches()
            buf = bytearray()
            payloads = [into(r, buf) or bytes(buf) for r in chunk] if fmt == "msgpack" else \
                [into(tagged(r), buf) or bytes(buf) for r in chunk]
            n += len([decode(p) for p in payloads])
        return n

    return run_block


def _hand_untyped(fmt: str, batches: list[list[Any]]) -> Any:
    """The untyped encoder and decoder (msgpack-python, stdlib json) in a bare loop: no operators."""
    from wirepipe.codecs.formats import FORMATS

    return _bare_loop(FORMATS[fmt].encoder(), FORMATS[fmt].decoder(), batches)


def _bare_loop(encode: Any, decode: Any, batches: list[list[Any]]) -> Any:
    def run() -> int:
        n = 0
        for chunk in batches:
            between_batches()
            n += len([decode(p) for p in [encode(r) for r in chunk]])
        return n

    return run


def _median_ns(r: Any) -> float:
    return statistics.median(r.seconds) / r.records * 1e9


def in_process(rounds: int, scale: float = 1.0) -> dict[str, float]:
    out = {}
    for dataset, full in (("point", 200_000), ("block", 2_000)):
        count = max(1, int(full * scale))
        records = get_dataset(dataset).sample(count)
        batches = chunks(records, 1000)
        for fmt in ("msgpack", "json"):
            variants = {
                "untyped": _as_a_run(_operators(fmt, None, batches)),
                "typed schema (msgspec)": _as_a_run(_operators(fmt, dataset, batches)),
                "hand-written msgspec loop": _as_a_run(_hand_msgspec(fmt, dataset, batches)),
                "hand-written untyped loop": _as_a_run(_hand_untyped(fmt, batches)),
            }
            res = interleave(variants, rounds=rounds)
            print()
            print(Table(f"{fmt} on {dataset}: {count:,} records, serialize + deserialize, {rounds} rounds",
                        ["variant", "rec/s best", "ns/record best", "ns/record median"],
                        [[name, f"{r.records / r.best:,.0f}", f"{r.best / r.records * 1e9:,.0f}",
                          f"{_median_ns(r):,.0f}"] for name, r in res.items()]).text(elsewhere=None), end="")
            typed = ratio(res, "typed schema (msgspec)", "untyped")
            hand = ratio(res, "typed schema (msgspec)", "hand-written msgspec loop")
            engines = ratio(res, "hand-written msgspec loop", "hand-written untyped loop")
            print(f"  ratio typed / untyped: {typed:.2f}x (target >= 1.3); typed / hand-written: {hand:.2f}; "
                  f"msgspec / untyped library, both by hand: {engines:.2f}x  (medians of per-round ratios)")
            out[f"{fmt}/{dataset}"] = typed
    return out


# --- B. over core NATS -----------------------------------------------------------------------------------

VARIANTS = {"bincode x100/msg": ("bincode", 100), "msgpack x1/msg": ("msgpack", 1)}


async def _publish(url: str, subject: str, count: int, fmt: str, per_message: int) -> None:
    from wirepipe.connectors.generate import GenerateSource
    from wirepipe.connectors.nats.core_sink import NatsSink
    from wirepipe.operators.pack import Pack
    from wirepipe.pipelines.pipeline import Pipeline

    ops: list[Any] = [Pack(per_message)] if per_message > 1 else []
    ops.append(Serialize(fmt, schema="point" if fmt == "bincode" else None))
    sink = NatsSink(subject, url=url, pending_size=64 * 1024 * 1024)
    await Pipeline(GenerateSource("point", count=count, batch_size=1000), ops, sink).run_async()
    print("done", flush=True)


async def _consume_once(url: str, count: int, fmt: str, per_message: int) -> float:
    from nats_consume import LatencySink, stalled
    from wirepipe.connectors.nats.core_source import NatsSource
    from wirepipe.operators.unpack import Unpack
    from wirepipe.pipelines.pipeline import Pipeline

    messages = count // per_message
    source = NatsSource("bench.formats", url=url, count=messages,
                        pending_msgs_limit=messages + 10, pending_bytes_limit=0)
    ops: list[Any] = [Deserialize(fmt, schema="point" if fmt == "bincode" else None, framed=per_message > 1)]
    if per_message > 1:
        ops.append(Unpack())
    sink = LatencySink()
    task = asyncio.ensure_future(Pipeline(source, ops, sink, flush_interval=3600).run_async())
    while not source.ready.is_set():
        await asyncio.sleep(0.005)
    pub = await asyncio.create_subprocess_exec(sys.executable, __file__, "publish", url, "bench.formats", str(count),
                                               fmt, str(per_message), stdout=asyncio.subprocess.PIPE)
    await stalled(lambda: sink.records, count, task, patience=10.0)
    source.stopping.set()
    stats = await task
    await pub.wait()
    # first to last record consumed: the publisher's start-up (imports, connect) is not counted
    elapsed = max(sink.last - sink.first, 1e-9)
    if stats.records_out < count:
        print(f"  {fmt} x{per_message}: {stats.records_out:,} of {count:,} records received (core NATS drops)")
    return stats.records_out / elapsed


async def over_nats(rounds: int, count: int) -> float:
    from wirepipe.connectors.nats.server import EmbeddedServer

    rates: dict[str, list[float]] = {k: [] for k in VARIANTS}
    async with EmbeddedServer() as srv:
        for fmt, k in VARIANTS.values():  # warm-up
            await _consume_once(srv.url, count // 10, fmt, k)
        for r in range(rounds):
            names = list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]
            for name in names:
                fmt, k = VARIANTS[name]
                rates[name].append(await _consume_once(srv.url, count, fmt, k))
    print(f"\ncore NATS, point, {count:,} records x {rounds} rounds, first to last record consumed "
          "(publisher in its own process)")
    print(Table("", ["variant", "best rec/s", "median rec/s"],
                [[name, f"{max(rs):,.0f}", f"{statistics.median(rs):,.0f}"] for name, rs in rates.items()])
          .text(elsewhere=None), end="")
    best = max(rates["bincode x100/msg"]) / max(rates["msgpack x1/msg"])
    med = statistics.median(rates["bincode x100/msg"]) / statistics.median(rates["msgpack x1/msg"])
    print(f"  ratio bincode x100 / msgpack x1: {best:.1f}x (best), {med:.1f}x (median); target >= 5")
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=200_000, help="records per NATS round")
    ap.add_argument("--skip-nats", action="store_true")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="in-process record counts times this (1: 200,000 points and 2,000 blocks)")
    args = ap.parse_args()
    # what wirepipe's own commands do (wirepipe run applies it); WIREPIPE_MALLOC=default: glibc's
    print(f"allocator: {keep_freed_memory()}")
    in_process(args.rounds, args.scale)
    if not args.skip_nats:
        asyncio.run(over_nats(args.rounds, args.count))


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "publish":
    asyncio.run(_publish(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])))
elif __name__ == "__main__":
    main()
