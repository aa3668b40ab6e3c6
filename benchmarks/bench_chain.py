"""The in-memory chain: wirepipe's Pipeline, the bare comprehension and Bytewax 0.21's same flow, side by side.

    python benchmarks/bench_chain.py [--count 1000000] [--rounds 5] [--fresh 3]

`point` records -> msgpack -> zstd level 1 -> null, in batches of 1,000, four ways:

- **wirepipe**: ``Pipeline(TestingSource(records), [serialize("msgpack"), compress("zstd", 1)], null_sink())``,
  built and run as a user writes it: the default Pipeline (what it has on is printed first);
- **bare**: ``[compress(pack(r)) for r in chunk]`` over the same 1,000-record chunks (msgpack's ``Packer``,
  zstandard's ``ZstdCompressor(level=1)``), the chunks cut beforehand: the reference;
- **staged**: the same calls a stage at a time, ``[compress(p) for p in [pack(r) for r in chunk]]``, as a
  pipeline runs them: each C loop stays hot in the CPU's caches, ~15% faster than bare on point records. What a
  Pipeline adds per batch is wirepipe's distance to this one (its own ratio column);
- **bytewax**: a ``Dataflow`` of ``bytewax.testing.TestingSource(records, batch_size=1000)``, ``op.map`` with the
  same pack, ``op.map`` with the same compress, and a sink that drops the items, under ``run_main`` (one worker,
  in this thread). Bytewax is the ``bench`` extra (``pip install '.[bench]'``); without it its column says
  "not installed".

Each round runs each variant once, interleaved, each round starting with the next one (after one warm-up run of
each). Timed: the process's CPU time (every thread of it; wall clock beside it, which a shared machine makes
noisy). Rates are millions of records per CPU second, the median of the rounds and their range; a ratio is the median over
rounds of a variant's rate over bare's (and over staged's) in the same round, with its range.

``--fresh N`` adds each variant's first run in a process of its own (N processes each, interleaved): what a
script that runs the chain once pays, the first build included (wirepipe's registries and params models,
Bytewax's dataflow); the imports are timed apart.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import interleave, pack_and_compress

BATCH = 1000
VARIANTS = ("wirepipe", "bare", "staged", "bytewax")


def bytewax_version() -> str | None:
    """The installed Bytewax's version, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bytewax")
    except PackageNotFoundError:
        return None


# --- the three runs: each takes the records (flat and as chunks) and returns how many it did -------------------


def run_wirepipe(records: list[Any], chunks: list[list[Any]]) -> int:
    from wirepipe import Pipeline, compress, null_sink, serialize
    from wirepipe.testing import TestingSource

    pipe = Pipeline(TestingSource(records), [serialize("msgpack"), compress("zstd", 1)], null_sink())
    return pipe.run().records_out


def run_bare(records: list[Any], chunks: list[list[Any]]) -> int:
    return pack_and_compress(chunks)


def run_staged(records: list[Any], chunks: list[list[Any]]) -> int:
    return pack_and_compress(chunks, by_stage=True)


def run_bytewax(records: list[Any], chunks: list[list[Any]]) -> int:
    import bytewax.operators as op
    import msgpack
    import zstandard
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import TestingSource, run_main

    class Drop(StatelessSinkPartition[bytes]):
        def __init__(self, counted: list[int]) -> None:
            self.counted = counted

        def write_batch(self, items: list[bytes]) -> None:
            self.counted[0] += len(items)

    class NullSink(DynamicSink[bytes]):
        def __init__(self) -> None:
            self.counted = [0]

        def build(self, step_id: str, worker_index: int, worker_count: int) -> Drop:
            return Drop(self.counted)

    sink = NullSink()
    flow = Dataflow("chain")
    stream = op.input("records", flow, TestingSource(records, batch_size=BATCH))
    stream = op.map("msgpack", stream, msgpack.Packer(use_bin_type=True).pack)
    stream = op.map("zstd", stream, zstandard.ZstdCompressor(level=1).compress)
    op.output("null", stream, sink)
    run_main(flow)
    return sink.counted[0]


RUNS: dict[str, Callable[[list[Any], list[list[Any]]], int]] = {
    "wirepipe": run_wirepipe, "bare": run_bare, "staged": run_staged, "bytewax": run_bytewax}
# what each run imports, timed apart from its first run in a fresh process
IMPORTS = {"wirepipe": ("wirepipe", "wirepipe.testing"), "bare": (), "staged": (),
           "bytewax": ("bytewax.dataflow", "bytewax.operators", "bytewax.outputs", "bytewax.testing")}


def point_records(count: int) -> tuple[list[Any], list[list[Any]]]:
    """``count`` point records, flat and in the 1,000-record chunks the bare loop runs over; collected."""
    from wirepipe.datasets import get_dataset

    chunks = list(get_dataset("point").records(count, seed=0, batch_size=BATCH))
    records = [r for chunk in chunks for r in chunk]
    # A million fresh dicts leave the collector a debt (young collections that walk them) that whichever variant
    # allocates next would pay: settled here, as in any process that has held its data a while.
    gc.collect()
    return records, chunks


# --- what the default Pipeline has on ------------------------------------------------------------------------


def defaults() -> list[str]:
    """What wirepipe's default Pipeline does in this process, as the run sees it."""
    from wirepipe import Pipeline, compress, null_sink, serialize
    from wirepipe.core.allocator import arena_reserve
    from wirepipe.metrics.tracing import wanted
    from wirepipe.testing import TestingSource

    pipe = Pipeline(TestingSource([{"x": 1, "y": 2}]), [serialize("msgpack"), compress("zstd", 1)], null_sink())
    pipe.run()
    run = pipe.last_run
    assert run is not None
    dead_letter = run.default_dead_letter
    return [
        f"metrics: {'on' if run.metrics is not None else 'off'} (on when the pipeline names a metrics path)",
        f"tracing: {'on' if wanted(pipe.tracing_spec) else 'off'} (on with tracing: or the OTEL_* variables)",
        f"dead letters: {getattr(dead_letter, 'path', dead_letter)} (opened at the first rejected record)",
        "on: the checks of the parts, the queue between source and operators "
        f"({pipe.queue_size} batches), the ack ledger and a commit every {pipe.flush_interval:g} s, the sink's "
        "retry, the collector policy (start-up frozen, young collections a batch apart), the headers "
        "(Content-Type, Content-Encoding)",
        "allocator policy: " + ("kept arenas" if arena_reserve() is not None else
                                "not applied (a script's default; point records are below its 512-byte limit)"),
    ]


# --- fresh processes ------------------------------------------------------------------------------------------


def child(variant: str, count: int) -> None:
    """One variant's first run in this fresh process: the imports, then the build and run, as JSON."""
    c0, t0 = time.process_time(), time.perf_counter()
    for module in (*IMPORTS[variant], "msgpack", "zstandard"):
        importlib.import_module(module)
    imports = (time.process_time() - c0, time.perf_counter() - t0)
    records, chunks = point_records(count)
    c0, t0 = time.process_time(), time.perf_counter()
    n = RUNS[variant](records, chunks)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    print(json.dumps({"records": n, "cpu": cpu, "wall": wall, "imports_cpu": imports[0], "imports_wall": imports[1]}))


def fresh(variants: list[str], count: int, runs: int) -> dict[str, list[dict[str, float]]]:
    """Each variant's first run in ``runs`` processes of its own, interleaved."""
    out: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for r in range(runs):
        shift = r % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            done = subprocess.run([sys.executable, __file__, "--child", variant, "--count", str(count)],
                                  capture_output=True, text=True, check=True)
            out[variant].append(json.loads(done.stdout.splitlines()[-1]))
    return out


# --- the tables ------------------------------------------------------------------------------------------------


def spread(values: list[float], fmt: str) -> str:
    """``median [min-max]``."""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def print_rates(title: str, rates: dict[str, list[float]], last: tuple[str, dict[str, str]], caption: str) -> None:
    """One table: each variant's rate (millions of records a CPU second) and its ratios to bare's and staged's in
    the same round, each ``median [range]``, and one more column (``last``: its header and a cell per variant)."""
    from wirepipe.core.table import Table

    rows = []
    for v in VARIANTS:
        if v not in rates:
            rows.append([v, *["not installed"] * 4])
            continue
        ratios = [[a / b for a, b in zip(rates[v], rates[base], strict=True)] for base in ("bare", "staged")]
        rows.append([v, spread([r / 1e6 for r in rates[v]], ".3f"), *(spread(r, ".3f") for r in ratios),
                     last[1][v]])
    print()
    print(Table(title, ["variant", "M records / CPU s", "ratio to bare", "ratio to staged", last[0]], rows,
                caption=caption).text(elsewhere=None), end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1_000_000, help="records per run (default 1000000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds in this process (default 5)")
    parser.add_argument("--fresh", type=int, default=0, metavar="N",
                        help="also each variant's first run in N fresh processes (default 0: not measured)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.count)
        return
    version = bytewax_version()
    variants = [v for v in VARIANTS if v != "bytewax" or version is not None]
    print("wirepipe's default Pipeline here:")
    for line in defaults():
        print(f"  {line}")
    print(f"bytewax: {version or 'not installed (pip install .[bench])'}")
    records, chunks = point_records(args.count)
    results = interleave({v: (lambda run=RUNS[v]: run(records, chunks)) for v in variants}, rounds=args.rounds,
                         rotate=True)
    for v in variants:
        assert results[v].records == args.count, f"{v} did {results[v].records} records of {args.count}"
    wall = {v: spread([args.count / s / 1e6 for s in results[v].seconds], ".3f") for v in variants}
    print_rates("point -> msgpack -> zstd level 1 -> null, in this process",
                {v: [args.count / s for s in results[v].cpu_seconds] for v in variants}, ("M records / wall s", wall),
                f"{args.count:,} point records a run, batches of {BATCH}; {args.rounds} interleaved rounds, median "
                "[range]. Ratios: each round's rate over bare's (target for wirepipe: >= 0.85) and over staged's, "
                "median [range].")
    if args.fresh:
        runs = fresh(variants, args.count, args.fresh)
        imports = {v: spread([r["imports_cpu"] for r in runs[v]], ".3f") for v in variants}
        print_rates("the same, each variant's first run in a fresh process",
                    {v: [args.count / r["cpu"] for r in runs[v]] for v in variants}, ("imports (CPU s)", imports),
                    f"{args.fresh} processes a variant, interleaved; the first run of each (build included), "
                    "median [range] of CPU time; the imports before it apart (CPU s)." + _BYTECODE)


# An editable install run with PYTHONDONTWRITEBYTECODE compiles every module it imports from source, every time.
_BYTECODE = " No .pyc cache (PYTHONDONTWRITEBYTECODE): modules compile as imported." \
    if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""


if __name__ == "__main__":
    main()
