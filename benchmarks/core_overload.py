"""Core NATS overload (issue 11, defect 1): what was sent, what arrived, what the worker counted as lost.

Two scenarios, each against a fresh nats-server, worker and publisher as separate processes:

- overload: a worker whose ``map`` costs 2 ms/record (GIL held) against a publisher at
  13k records/s: it cannot keep up, so core NATS loses; every loss must be counted.
- bursts: a worker that keeps up on average (20 us/record, 50k/s) against bursts of
  records sent as fast as possible; the socket must be read while the operators run so
  nothing is lost to the bursts.

    python benchmarks/core_overload.py [--count 300000] [--rate 13000] [--spin-us 2000]
        [--burst-count 200000] [--burst 50000] [--burst-spin-us 20] [--max-pending 1MB]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.overload import run_scenario

from wirepipe.connectors.nats.server import EmbeddedServer, ServerOptions
from wirepipe.core.units import parse_size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=300_000)
    ap.add_argument("--rate", type=float, default=13_000)
    ap.add_argument("--spin-us", type=float, default=2000)
    ap.add_argument("--burst-count", type=int, default=200_000)
    ap.add_argument("--burst", type=int, default=50_000)
    ap.add_argument("--pause", type=float, default=3.0)
    ap.add_argument("--burst-spin-us", type=float, default=200)
    ap.add_argument("--pad", type=int, default=1000, help="bursts: bytes of padding per record")
    ap.add_argument("--max-pending", default=None, help="the server's max_pending per client (default 64MB)")
    ap.add_argument("--tail", type=int, default=50, help="records sent slowly at the end: a loss at the end "
                    "of the run shows as a gap (0: none, as the 'before' code had no counting anyway)")
    ap.add_argument("--only", choices=["overload", "bursts"])
    args = ap.parse_args()
    extra = {"max_pending": parse_size(args.max_pending)} if args.max_pending else {}
    scenarios = {
        "overload": dict(count=args.count, rate=args.rate, spin_us=args.spin_us, tail=args.tail),
        "bursts": dict(count=args.burst_count, burst=args.burst, pause=args.pause, spin_us=args.burst_spin_us,
                       pad=args.pad, tail=args.tail),
    }
    for name, kw in scenarios.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp, \
                EmbeddedServer(options=ServerOptions(extra=extra), log_file=Path(tmp) / "server.log") as srv:
            out = run_scenario(srv.url, Path(tmp), timeout=900, server_log=str(Path(tmp) / "server.log"), **kw)
            print(f"{name}: {out.line()}")
            print(f"  summary: {out.summary}")


if __name__ == "__main__":
    main()
