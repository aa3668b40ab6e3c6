"""Throughput of one in-memory pipeline with metrics on vs off, in the same process, interleaved.

    python benchmarks/bench_metrics_overhead.py [--records 200000] [--batch-size 1000] [--rounds 201]

The pipeline is ``TestingSource (point records) -> msgpack -> zstd:fastest -> decompress
-> deserialize -> null``: small records, so the per-batch cost of metrics weighs as much
as it can. The source replays pre-generated batches, so record generation is not timed.
Metrics "on" writes real Parquet parts to a temporary folder. Prints records/s of each
round and the median of the rounds' on/off ratios (target >= 0.95) with its 95% interval.

Why 201 rounds (~3 minutes): on the 2-core VMs this runs on, one 0.4 s run's speed swings
~20% from the next one's (runs of the same pipeline, same process; an A/A test of "off"
against "off" spread 0.97-1.09 over five runs of 31 rounds), so the median of 31 ratios
has ~4.5% of noise against an effect of ~2%. With 201 rounds it has ~1.7%, and the interval
printed says how far the figure can be trusted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from wirepipe.connectors.null import NullSink
from wirepipe.datasets import get_dataset
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.study.report.statistics import (
    median_interval,  # the bench report's: exact binomial order statistics
)
from wirepipe.testing import TestingSource


def run_once(chunks: list[list[dict[str, int]]], metrics: Path | None) -> tuple[float, float]:
    """(records per wall second, records per CPU second of this process)."""
    ops = [Serialize("msgpack"), Compress("zstd", "fastest"), Decompress("zstd"), Deserialize("msgpack")]
    pipe = Pipeline(TestingSource.from_batches(chunks, raw_record_nbytes=8), ops, NullSink(), name="overhead", metrics=metrics)
    wall, cpu = time.perf_counter(), time.process_time()
    stats = pipe.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return stats.records_out / wall, stats.records_out / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=201)  # ~0.8 s a round: see the docstring
    args = parser.parse_args()
    chunks = list(get_dataset("point").records(args.records, seed=0, batch_size=args.batch_size))
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        run_once(chunks, None)  # warm-up: imports, codec set-up
        run_once(chunks, Path(tmp) / "warmup.parquet")
        for r in range(args.rounds):
            # alternate which goes first, so drift on a shared machine hits both alike
            order = [None, Path(tmp) / f"r{r}.parquet"] if r % 2 == 0 else [Path(tmp) / f"r{r}.parquet", None]
            for metrics in order:
                wall, cpu = run_once(chunks, metrics)
                (off if metrics is None else on).append((wall, cpu))
                print(f"round {r}: metrics {'on ' if metrics else 'off'} {wall:>10,.0f} records/s "
                      f"({cpu:>10,.0f} per CPU second)")
    for i, what in enumerate(("wall clock", "CPU time")):
        a = statistics.median(x[i] for x in off)
        b = statistics.median(x[i] for x in on)
        ratios = [y[i] / x[i] for x, y in zip(off, on, strict=True)]
        mid, low, high = median_interval(ratios)
        print(f"{what:>10}: median records/s off {a:,.0f}, on {b:,.0f}: ratio on/off = {mid:.3f} "
              f"[95% {low:.3f}-{high:.3f}] (median of the rounds' ratios; ratio of the medians {b / a:.3f})")
    print(f"batch size {args.batch_size}, {args.rounds} interleaved rounds; target ratio >= 0.95. The rounds' "
          "ratios are the figure, as in the other benchmarks (benchmarks/common.py): on a machine whose speed "
          "drifts between rounds, each round compares the two runs made side by side")

if __name__ == "__main__":
    main()
