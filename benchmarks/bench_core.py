"""In-memory chain: wirepipe vs a hand-written loop doing the same calls on the same records.

    python benchmarks/bench_core.py [--count N] [--rounds R]

Chain: generate -> serialize msgpack -> compress zstd fastest -> null, on `point` and
`block`. Two comparisons:
- full: both sides generate the records (the same dataset calls), then encode them;
- operators: both sides start from the same pre-generated records, so the ratio shows
  the framework's own overhead on the encode path.
Each with metrics off and on. Target (issue 2): ratio >= 0.9 off, >= 0.85 on.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import interleave, pack_and_compress, print_table
from wirepipe.connectors.connector import Source
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.null import NullSink
from wirepipe.core.allocator import keep_freed_memory
from wirepipe.datasets import get_dataset
from wirepipe.operators.compress import Compress
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.testing import TestingSource

BATCH = 1000


def hand_full(dataset: str, count: int) -> int:
    import msgpack
    import zstandard

    pack = msgpack.Packer(use_bin_type=True).pack
    compress = zstandard.ZstdCompressor(level=1).compress
    ds = get_dataset(dataset)
    n = 0
    for chunk in ds.records(count, 0, BATCH):
        out = [compress(pack(r)) for r in chunk]
        n += len(out)
    return n


def wirepipe_run(source: Source, metrics: Path | None) -> int:
    pipe = Pipeline(source, [Serialize("msgpack"), Compress("zstd", "fastest")], NullSink(), metrics=metrics)
    return asyncio.run(pipe.run_async()).records_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=None, help="records per run (default: 1000000 point, 20000 block)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    # What `wirepipe run` does in its own process (a script that builds pipelines keeps its allocator unless it
    # asks); both sides run under it, as they would in one worker.
    print(f"allocator: {keep_freed_memory()}")
    tmp = Path(tempfile.mkdtemp(prefix="wirepipe-bench-"))
    for dataset, default_count in (("point", 1_000_000), ("block", 20_000)):
        count = args.count or default_count
        chunks = list(get_dataset(dataset).records(count, 0, BATCH))
        variants = {
            "hand loop (generate+encode)": lambda d=dataset, c=count: hand_full(d, c),
            "wirepipe (generate+encode)": lambda d=dataset, c=count: wirepipe_run(GenerateSource(d, count=c), None),
            "wirepipe +metrics (generate+encode)": lambda d=dataset, c=count: wirepipe_run(
                GenerateSource(d, count=c), tmp / f"{d}-full.parquet"),
        }
        results = interleave(variants, rounds=args.rounds)
        print_table(f"{dataset}: generate -> msgpack -> zstd:fastest -> null, {count} records", results,
                    "hand loop (generate+encode)")
        variants = {
            "hand loop (encode only)": lambda ch=chunks: pack_and_compress(ch),
            "wirepipe (encode only)": lambda ch=chunks: wirepipe_run(TestingSource.from_batches(ch), None),
            "wirepipe +metrics (encode only)": lambda ch=chunks, d=dataset: wirepipe_run(
                TestingSource.from_batches(ch), tmp / f"{d}-ops.parquet"),
        }
        results = interleave(variants, rounds=args.rounds)
        print_table(f"{dataset}: pre-generated records -> msgpack -> zstd:fastest -> null", results,
                    "hand loop (encode only)")


if __name__ == "__main__":
    main()
