"""Does ``wirepipe plan`` predict? It runs the plan, then the pools it predicts for, and prints measured/predicted.

Each round runs ``wirepipe plan`` (a process of its own, as a user runs it: the in-process costs, then the
calibration, a worker of the consume pipeline on a local nats-server for a few seconds) for the pipeline
of ``bench_workers.py`` (``block`` records, msgpack + zstd best, Parquet parts) on one node with this
machine's cores, reads the records/s it predicts for pools of 1 and of all the cores' workers, then
runs those pools (``bench_workers.run_pool``: the real supervisor and workers, steady state) and
prints measured/predicted for each. Plan and pools alternate, round after round, so the load of the
machine weighs on both alike. The target is measured/predicted within ``ERROR_BAND`` (+-20%), which
the plan states in its output.

    python benchmarks/bench_plan.py [--count 120000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_workers import encoded_blocks, fill, run_pool
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.units import parse_rate
from wirepipe.pipelines.pool import usable_cores
from wirepipe.study.plan.capacity import ERROR_BAND

PREDICTED = re.compile(r"predicted on this machine \((\d+) cores\): (.*) \(records/s")


def run_plan(cores: int) -> tuple[dict[int, float], list[str]]:
    """``wirepipe plan`` for bench_workers' pipeline on one node of ``cores``: the records/s it predicts per
    pool size, and the lines it printed about the consume side."""
    res = subprocess.run([sys.executable, "-m", "wirepipe.cli", "plan", "--rate", "10k", "--dataset", "block",
                          "--chain", "msgpack|zstd:best", "--sink", "parquet", "--replicas", "1", "--nodes", "1",
                          "--cores-per-node", str(cores)], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"wirepipe plan failed ({res.returncode}): {res.stderr.strip()}")
    found = PREDICTED.search(res.stdout)
    if not found:
        raise SystemExit(f"wirepipe plan printed no prediction:\n{res.stdout}")
    predicted = {int(m[1]): parse_rate(m[2]) for m in re.finditer(r"(\d+) workers? ~([\d.]+[kM]?)/s", found[2])}
    lines = [line for line in res.stdout.splitlines() if "calibrated" in line or "predicted" in line
             or "consumers:" in line]
    return predicted, lines


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=120000, help="records in the stream each pool reads (a short "
                    "run's window is mostly the pools' start-up and their first commits)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cores = usable_cores()
    sizes = sorted({1, cores})
    tmp = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    ratios: dict[int, list[float]] = {w: [] for w in sizes}
    try:
        with EmbeddedServer(store_dir=tmp / "store") as server:
            pid = server.proc.pid if server.proc else None
            await fill(server.url, args.count, encoded_blocks(), 1)
            for r in range(args.rounds):
                predicted, lines = run_plan(cores)
                print(f"round {r + 1}: wirepipe plan says")
                print("\n".join(f"    {line.strip()}" for line in lines))
                for workers in sizes:
                    measured = await run_pool(server.url, args.count, workers, tmp, pid)
                    ratio = measured / predicted[workers]
                    ratios[workers].append(ratio)
                    print(f"  --workers {workers}: predicted {predicted[workers]:,.0f} records/s, measured "
                          f"{measured:,.0f}: measured/predicted {ratio:.2f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"measured/predicted over {args.rounds} rounds (target: within +-{ERROR_BAND:.0%}):")
    for workers, values in ratios.items():
        ok = all(abs(v - 1) <= ERROR_BAND for v in values)
        print(f"  --workers {workers}: median {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
              f"{'' if ok else '  (outside the band)'}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
