"""Does ``wirepipe plan`` predict? It runs the plan, then the pools it predicts for, and prints measured/predicted.

Each round runs the plan (``measure_costs``, as ``wirepipe plan`` does: the in-process costs, then the
calibration, the consume pipeline as one worker, as a worker per core and as one worker again on a local
nats-server for a few seconds each) for the pipeline of ``bench_workers.py`` (``block`` records, msgpack + zstd best,
Parquet parts) on one node with this machine's cores, takes the records/s it predicts for pools of 1
and of all the cores' workers, then runs those pools (``bench_workers.run_pool``: the real supervisor
and workers, steady state) and prints measured/predicted for each. Plan and pools alternate, round
after round, so the load of the machine weighs on both alike. The target is measured/predicted within
``ERROR_BAND`` (+-20%), which the plan states in its output.

The plan predicts for the machine as the calibration found it: with the cores the rest of the machine
kept busy then. On a shared machine that load moves between the calibration and the pool, so each
pool's line also gives measured/predicted at the load the pool met (``predict_rate(..., others=)``:
the model itself, without the load's drift), its workers' and nats-server's CPU per record over the
calibration's (which side moved), and the pool over the same pool a round earlier: no plan can be nearer
than the pool is to itself, and the summary prints that spread beside the plan's error.

    python benchmarks/bench_plan.py [--count 120000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench_workers import RUNS, STREAM, encoded_blocks, fill, run_pool, settle
from wirepipe.connectors.nats.connection import connection_config
from wirepipe.connectors.nats.server import EmbeddedServer
from wirepipe.core.allocator import keep_freed_memory
from wirepipe.pipelines.pool import usable_cores
from wirepipe.study.plan.calibrate import PoolRun, consume_pipeline
from wirepipe.study.plan.capacity import ERROR_BAND, Deployment, measure_costs, plan, predict_rate

CHAIN = "msgpack|zstd:best"


def band(values: list[float]) -> str:
    ok = all(abs(v - 1) <= ERROR_BAND for v in values)
    return (f"median {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
            f"{'' if ok else '  (outside the band)'}")


def planned_pipeline(url: str, out: Path, durable: str) -> dict[str, Any]:
    """The pipeline the plan calibrates and predicts for (``calibrate.consume_pipeline``), on the bench's stream."""
    return consume_pipeline(connection_config(url), CHAIN, "parquet", out, durable=durable, stream=STREAM)


def figures(run: PoolRun) -> dict[str, Any]:
    return {**asdict(run), "rate": run.rate, "ceiling": run.ceiling}


def cost_moves(run: PoolRun, calibrated: PoolRun) -> tuple[float, float | None]:
    """What a record cost the pool over what it cost the calibration's run of its size: the worker's CPU, and
    nats-server's (None where it is not read). Both up together: the machine's cores got slower, not one side."""
    server = run.server_us / calibrated.server_us if run.server_us and calibrated.server_us else None
    return run.worker_us / calibrated.worker_us, server


def cost_line(run: PoolRun, calibrated: PoolRun) -> str:
    worker, server = cost_moves(run, calibrated)
    return (f"CPU per record, pool (calibration): worker {run.worker_us:.1f} us ({calibrated.worker_us:.1f}) = "
            f"{worker:.2f}x" + (f", nats-server {run.server_us:.1f} ({calibrated.server_us:.1f}) = {server:.2f}x"
                                if server is not None else ""))


def spread_of(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"


def spread(url: str, args: argparse.Namespace, sizes: list[int], tmp: Path, pid: int | None) -> list[dict[str, Any]]:
    """``--no-plan``: the same pools back to back, each over the one of its size before it: what a plan calibrated
    with that very pool a minute earlier would have measured/predicted."""
    rates: dict[int, list[float]] = {w: [] for w in sizes}
    rounds = []
    for r in range(args.rounds):
        for workers in sizes:
            rates[workers].append(asyncio.run(run_pool(url, args.count, workers, tmp, pid, planned_pipeline)))
            run = RUNS[f"workers {workers}"][-1]
            rounds.append({"round": r + 1, "workers": workers, "pool": figures(run), "load": os.getloadavg()})
            before = rates[workers][-2] if len(rates[workers]) > 1 else None
            print(f"  round {r + 1} --workers {workers}: {run.rate:,.0f} records/s (the rest of the machine "
                  f"{run.others:.2f} cores busy, worker {run.worker_us:.1f} us/record)"
                  + (f"; over the previous pool of {workers}: {run.rate / before:.2f}" if before else ""), flush=True)
    print(f"each pool over the previous one of its size, {args.rounds} rounds (a plan can do no better):")
    for workers in sizes:
        steps = [b / a for a, b in zip(rates[workers], rates[workers][1:], strict=False)]
        if steps:
            print(f"  --workers {workers}: {band(steps)}")
    return rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=120000, help="records in the stream each pool reads (a short "
                    "run's window is mostly the pools' start-up and their first commits)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-plan", action="store_true", help="run the pools alone, back to back: their own spread")
    ap.add_argument("--json", type=Path, help="also write each round's calibration and pools as JSON")
    args = ap.parse_args()
    keep_freed_memory()  # as in `wirepipe plan`, whose in-process costs run under wirepipe's allocator policy
    cores = usable_cores()
    sizes = sorted({1, cores})
    tmp = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    ratios: dict[int, list[float]] = {w: [] for w in sizes}
    at_load: dict[int, list[float]] = {w: [] for w in sizes}
    again: dict[int, list[float]] = {w: [] for w in sizes}  # each pool over the same pool a round earlier
    moved: dict[int, list[tuple[float, float | None]]] = {w: [] for w in sizes}  # CPU per record, pool / calibration
    rounds: list[dict[str, Any]] = []
    try:
        with EmbeddedServer(store_dir=tmp / "store") as server:
            pid = server.proc.pid if server.proc else None
            asyncio.run(fill(server.url, args.count, encoded_blocks(), 1))
            settle(tmp / "store")
            if args.no_plan:
                rounds = spread(server.url, args, sizes, tmp, pid)
            for r in range(0 if args.no_plan else args.rounds):
                began = time.monotonic()
                costs = measure_costs("block", CHAIN, transport="jetstream", sink="parquet", calibrate=True)
                took = time.monotonic() - began  # what `wirepipe plan` costs its user, calibration included
                lines = plan(costs, Deployment(rate=1e4, replicas=1, nodes=1, cores_per_node=cores)).lines()
                print(f"round {r + 1}: wirepipe plan says (its costs measured in {took:.1f}s)")
                print("\n".join(f"    {line.strip()}" for line in lines
                                if "calibrated" in line or "predicted" in line or "consumers:" in line))
                assert costs.calibrated is not None
                for workers in sizes:
                    predicted = predict_rate(costs, workers, cores)
                    measured = asyncio.run(run_pool(server.url, args.count, workers, tmp, pid, planned_pipeline))
                    run = RUNS[f"workers {workers}"][-1]
                    loaded = predict_rate(costs, workers, cores, others=run.others)
                    ratios[workers].append(measured / predicted)
                    at_load[workers].append(measured / loaded)
                    calibrated = costs.calibrated.busiest if workers == cores else costs.calibrated.alone
                    moved[workers].append(cost_moves(run, calibrated))
                    pools = RUNS[f"workers {workers}"]
                    if len(pools) > 1:
                        again[workers].append(pools[-1].rate / pools[-2].rate)
                    rounds.append({"round": r + 1, "workers": workers, "predicted": predicted, "pool": figures(run),
                                   "one": figures(costs.calibrated.one),
                                   "again": figures(costs.calibrated.again) if costs.calibrated.again else None,
                                   "full": figures(costs.calibrated.full) if costs.calibrated.full else None,
                                   "plan_seconds": took, "load": os.getloadavg()})
                    print(f"  --workers {workers}: predicted {predicted:,.0f} records/s, measured {measured:,.0f}: "
                          f"measured/predicted {measured / predicted:.2f}; at the load the pool met (the rest of "
                          f"the machine {run.others:.2f} cores busy) {loaded:,.0f}: {measured / loaded:.2f}",
                          flush=True)
                    print(f"      {cost_line(run, calibrated)}"
                          + (f"; this pool over the same pool a round earlier: {again[workers][-1]:.2f}"
                             if len(pools) > 1 else ""), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"count": args.count, "rounds": rounds}, indent=1))
    if not args.no_plan:
        print(f"measured/predicted over {args.rounds} rounds (target: within +-{ERROR_BAND:.0%}):")
        for workers in sizes:
            print(f"  --workers {workers}: {band(ratios[workers])}; at the pool's load {band(at_load[workers])}")
        print("the same pool, round after round (no plan can be nearer than the pool is to itself), and what a "
              "record cost the pool over what it cost the calibration:")
        for workers in sizes:
            worker, server = [m[0] for m in moved[workers]], [m[1] for m in moved[workers] if m[1] is not None]
            print(f"  --workers {workers}: over the previous round {band(again[workers]) if again[workers] else '-'}; "
                  f"CPU per record, worker {spread_of(worker)}" + (f", nats-server {spread_of(server)}" if server else ""))
    print(f"  load average (1, 5, 15 min) at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
