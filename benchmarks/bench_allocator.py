"""What the allocator policy (``wirepipe.allocator``) gives: the same pipelines with glibc's default and with it.

    python benchmarks/bench_allocator.py [--rounds 3] [--runs 5]

The policy is per process, so each side runs in its own child process (``WIREPIPE_MALLOC=default``
for glibc's default), launched alternately ``--rounds`` times; each child runs every pipeline
``--runs`` times over pre-generated records (TestingSource -> operators -> null, batches of 1000)
and reports its best. Printed: records/s of both sides and the ratio policy / default, the median
over the rounds. Small records (``point``, under CPython's 512-byte allocator limit) should not
move; large ones (``block``, ~10 KB) are where the page faults were.
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
    from wirepipe.connectors.files import NullSink
    from wirepipe.datasets import get_dataset
    from wirepipe.operators.chain import chain_operators
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
    from wirepipe.allocator import keep_freed_memory

    print(json.dumps({"allocator": keep_freed_memory(), "rates": out}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    sides = {"default": {**os.environ, "WIREPIPE_MALLOC": "default"},
             "policy": {k: v for k, v in os.environ.items() if k != "WIREPIPE_MALLOC"}}
    rates: dict[str, list[dict[str, float]]] = {"default": [], "policy": []}
    for r in range(args.rounds):
        for side in (("default", "policy") if r % 2 == 0 else ("policy", "default")):
            done = subprocess.run([sys.executable, __file__, "--child", str(args.runs)], env=sides[side],
                                  check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            rates[side].append(result["rates"])
            print(f"round {r}, {side}: {result['allocator']}")
    print(f"\n  {'pipeline':<40} {'default rec/s':>14} {'policy rec/s':>14} {'policy/default':>15}")
    for label in CHAINS:
        a = statistics.median(x[label] for x in rates["default"])
        b = statistics.median(x[label] for x in rates["policy"])
        paired = statistics.median(y[label] / x[label] for x, y in zip(rates["default"], rates["policy"], strict=True))
        print(f"  {label:<40} {a:>14,.0f} {b:>14,.0f} {paired:>15.2f}")
    print(f"\n(best of {args.runs} runs in each child; medians over {args.rounds} rounds; ratio: median of the rounds')")


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--child":
    child(int(sys.argv[2]))
elif __name__ == "__main__":
    main()
