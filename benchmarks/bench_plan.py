"""Does ``wirepipe plan`` predict? It runs the plan, then the pools it predicts for, and prints measured/predicted.

Each round runs the plan (``measure_costs``, as ``wirepipe plan`` does: the in-process costs, then the
calibration, the consume pipeline as one worker and as a worker per core on a local nats-server for a
few seconds each) for the pipeline of ``bench_workers.py`` (``block`` records, msgpack + zstd best,
Parquet parts) on one node with this machine's cores, takes the records/s it predicts for pools of 1
and of all the cores' workers, then runs those pools (``bench_workers.run_pool``: the real supervisor
and workers, steady state) and prints measured/predicted for each. Plan and pools alternate, round
after round, so the load of the machine weighs on both alike. The target is measured/predicted within
``ERROR_BAND`` (+-20%), which the plan states in its output.

The plan predicts for the machine as the calibration found it: with the cores the rest of the machine
kept busy then. On a shared machine that load moves between the calibration and the pool, so each
pool's line also gives measured/predicted at the load the pool met (``predict_rate(..., others=)``:
the model itself, without the load's drift).

    python benchmarks/bench_plan.py [--count 120000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_workers import RUNS, encoded_blocks, fill, run_pool
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.allocator import keep_freed_memory
from wirepipe.pipelines.pool import usable_cores
from wirepipe.study.plan.capacity import ERROR_BAND, Deployment, measure_costs, plan, predict_rate


def band(values: list[float]) -> str:
    ok = all(abs(v - 1) <= ERROR_BAND for v in values)
    return (f"median {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
            f"{'' if ok else '  (outside the band)'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=120000, help="records in the stream each pool reads (a short "
                    "run's window is mostly the pools' start-up and their first commits)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    keep_freed_memory()  # as in `wirepipe plan`, whose in-process costs run under wirepipe's allocator policy
    cores = usable_cores()
    sizes = sorted({1, cores})
    tmp = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    ratios: dict[int, list[float]] = {w: [] for w in sizes}
    at_load: dict[int, list[float]] = {w: [] for w in sizes}
    try:
        with EmbeddedServer(store_dir=tmp / "store") as server:
            pid = server.proc.pid if server.proc else None
            asyncio.run(fill(server.url, args.count, encoded_blocks(), 1))
            for r in range(args.rounds):
                costs = measure_costs("block", "msgpack|zstd:best", transport="jetstream", sink="parquet",
                                      calibrate=True)
                lines = plan(costs, Deployment(rate=1e4, replicas=1, nodes=1, cores_per_node=cores)).lines()
                print(f"round {r + 1}: wirepipe plan says")
                print("\n".join(f"    {line.strip()}" for line in lines
                                if "calibrated" in line or "predicted" in line or "consumers:" in line))
                for workers in sizes:
                    predicted = predict_rate(costs, workers, cores)
                    measured = asyncio.run(run_pool(server.url, args.count, workers, tmp, pid))
                    run = RUNS[f"workers {workers}"][-1]
                    loaded = predict_rate(costs, workers, cores, others=run.others)
                    ratios[workers].append(measured / predicted)
                    at_load[workers].append(measured / loaded)
                    print(f"  --workers {workers}: predicted {predicted:,.0f} records/s, measured {measured:,.0f}: "
                          f"measured/predicted {measured / predicted:.2f}; at the load the pool met (the rest of "
                          f"the machine {run.others:.2f} cores busy) {loaded:,.0f}: {measured / loaded:.2f}",
                          flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"measured/predicted over {args.rounds} rounds (target: within +-{ERROR_BAND:.0%}):")
    for workers in sizes:
        print(f"  --workers {workers}: {band(ratios[workers])}; at the pool's load {band(at_load[workers])}")
    print(f"  load average (1, 5, 15 min) at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
