"""What the allocator policy (``wirepipe.core.allocator``) gives: the same pipelines with the allocators' defaults,
with its glibc part only, and whole.

    python benchmarks/bench_allocator.py [--rounds 3] [--runs 5]

The policy is per process, so each side runs in its own child process (``WIREPIPE_MALLOC=default``
for the defaults, ``WIREPIPE_MALLOC=glibc`` for glibc's thresholds without CPython's arenas kept),
launched in turn ``--rounds`` times; each child runs every pipeline ``--runs`` times over
pre-generated records (TestingSource -> operators -> null, batches of 1000) and reports its best.
Printed: records/s of each side and the ratios policy / default and policy / glibc only, medians
over the rounds. Small records (``point``, under CPython's 512-byte allocator limit) should not
move; large ones (``block``, ~10 KB) are where the page faults were: glibc's for the payloads,
CPython's arenas for what decoding makes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# label: (dataset, chain, sides of it to run, typed schema)
CHAINS = {
    "block: msgpack -> deserialize": ("block", "msgpack", "both", False),
    "block: msgpack (schema) -> deserialize": ("block", "msgpack", "both", True),
    "block: msgpack -> zstd:fastest": ("block", "msgpack|zstd:fastest", "encode", False),
    "point: msgpack -> zstd -> back": ("point", "msgpack|zstd:fastest", "both", False),
}
COUNTS = {"block": 4000, "point": 200_000}


def child(runs: int) -> None:
    from wirepipe.core.allocator import keep_freed_memory

    policy = keep_freed_memory()  # what wirepipe's own commands do (WIREPIPE_MALLOC picks the side)
    from wirepipe.connectors.null import NullSink
    from wirepipe.datasets import get_dataset
    from wirepipe.operators.chain_operators import chain_operators
    from wirepipe.pipelines.pipeline import Pipeline
    from wirepipe.testing import TestingSource

    def operators(dataset: str, chain: str, sides: str, typed: bool) -> list[object]:
        encode, decode = chain_operators(chain, schema=get_dataset(dataset).schema if typed else None)
        return encode + decode if sides == "both" else encode

    out = {}
    for label, (dataset, chain, sides, typed) in CHAINS.items():
        chunks = list(get_dataset(dataset).records(COUNTS[dataset], seed=0, batch_size=1000))
        best = 0.0
        for _ in range(runs + 1):  # the first warms up
            pipe = Pipeline(TestingSource.from_batches(chunks), operators(dataset, chain, sides, typed), NullSink())
            t = time.perf_counter()
            stats = pipe.run()
            best = max(best, stats.records_out / (time.perf_counter() - t))
        out[label] = best
    print(json.dumps({"allocator": policy, "rates": out}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "WIREPIPE_MALLOC"}
    sides = {"default": {**base, "WIREPIPE_MALLOC": "default"}, "glibc only": {**base, "WIREPIPE_MALLOC": "glibc"},
             "policy": base}
    names = list(sides)
    rates: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for r in range(args.rounds):
        for side in names[r % 3:] + names[:r % 3]:  # each side goes first in turn
            done = subprocess.run([sys.executable, __file__, "--child", str(args.runs)], env=sides[side],
                                  check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rates[side].append(result["rates"])
            print(f"round {r}, {side}: {result['allocator']}")

    def paired(label: str, a: str, b: str) -> float:
        return statistics.median(y[label] / x[label] for x, y in zip(rates[b], rates[a], strict=True))

    from wirepipe.core.table import Table

    rows = []
    for label in CHAINS:
        medians = [statistics.median(x[label] for x in rates[side]) for side in names]
        rows.append([label, *(f"{m:,.0f}" for m in medians), f"{paired(label, 'policy', 'default'):.2f}",
                     f"{paired(label, 'policy', 'glibc only'):.2f}"])
    print()
    print(Table("", ["pipeline", "default rec/s", "glibc only", "policy rec/s", "policy/default", "policy/glibc only"],
                rows).text(elsewhere=None), end="")
    print(f"\n(best of {args.runs} runs in each child; medians over {args.rounds} rounds; ratios: medians of the rounds')")


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--child":
    child(int(sys.argv[2]))
elif __name__ == "__main__":
    main()
