"""Shared parts of the NATS benchmarks: timing rounds, a latency subscriber process, the report.

Every benchmark runs wirepipe and a hand-written nats-py loop doing the same work on the
same server in the same process, interleaved over several rounds, and prints the best
records/s of each, the ratio, msgs/s and MB/s, and (like ``nats bench``) latency
percentiles measured by a separate subscriber process from ``Wirepipe-Sent-At``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from wirepipe.wire import Header


@dataclass
class Result:
    name: str
    rates: list[float] = field(default_factory=list)
    mbps: list[float] = field(default_factory=list)
    latency: dict[str, float] | None = None

    @property
    def best(self) -> float:
        return max(self.rates)


async def timed(fn: Callable[[], Awaitable[tuple[int, int]]]) -> tuple[float, float]:
    """Run ``fn`` (returns records, payload bytes); records/s and MB/s."""
    t0 = time.perf_counter()
    n, nbytes = await fn()
    dt = time.perf_counter() - t0
    return n / dt, nbytes / dt / 1e6


async def interleave(rounds: int, variants: dict[str, Callable[[], Awaitable[tuple[int, int]]]]) -> dict[str, Result]:
    results = {name: Result(name) for name in variants}
    names = list(variants)
    for name in names:  # warm-up (imports, codec contexts, server caches), not recorded
        await variants[name]()
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            rate, mbps = await timed(variants[name])
            results[name].rates.append(rate)
            results[name].mbps.append(mbps)
    return results


async def paced_points(n: int, rate: float | None = None) -> Any:
    """The ``point`` records in chunks, paced like the generate source (about ten chunks a second)."""
    from wirepipe.datasets import get_dataset

    started = time.monotonic()
    sent = 0
    for chunk in get_dataset("point").records(n, 0, 1000 if not rate else max(1, int(rate / 10))):
        yield chunk
        sent += len(chunk)
        if rate:
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)


def attach_latency(results: dict[str, Result], lats: dict[str, list[float]]) -> None:
    """Latency percentiles (us) measured in-process, in the shape ``report`` prints."""
    for name, r in results.items():
        p = percentiles(lats[name])
        r.latency = {"p50_us": p["p50"], "p90_us": p["p90"], "p99_us": p["p99"], "msgs_per_s": r.best,
                     "mb_per_s": max(r.mbps), "received": len(lats[name])}


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": q[49], "p90": q[89], "p99": q[98]}


# --- the latency subscriber (a separate process, so it does not share the publisher's core) ---

def start_subscriber(url: str, subject: str, count: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "subscribe", url, subject, str(count)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def finish_subscriber(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


async def _subscribe(url: str, subject: str, count: int) -> None:
    import nats

    nc = await nats.connect(url)
    lat: list[int] = []
    got = 0
    nbytes = 0
    first = last = 0.0
    done = asyncio.Event()
    sent_at = Header.SENT_AT

    async def cb(msg: Any) -> None:
        nonlocal got, nbytes, first, last
        now = time.time_ns()
        if not got:
            first = time.perf_counter()
        got += 1
        nbytes += len(msg.data)
        h = msg.headers
        if h and sent_at in h:
            lat.append(now - int(h[sent_at]))
        last = time.perf_counter()
        if got >= count:
            done.set()

    await nc.subscribe(subject, cb=cb, pending_msgs_limit=count + 10, pending_bytes_limit=0)
    await nc.flush()
    print("ready", flush=True)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(done.wait(), 60)
    await nc.close()
    span = max(last - first, 1e-9)
    p = percentiles([v / 1000 for v in lat])
    print(json.dumps({"received": got, "msgs_per_s": got / span, "mb_per_s": nbytes / span / 1e6,
                      "p50_us": p["p50"], "p90_us": p["p90"], "p99_us": p["p99"]}), flush=True)


def start_publisher(url: str, subject: str, count: int, dataset: str = "point") -> subprocess.Popen[str]:
    """A process publishing ``count`` msgpack+zstd records of ``dataset`` with wire headers, as fast as it can."""
    return subprocess.Popen([sys.executable, __file__, "publish", url, subject, str(count), dataset],
                            stdout=subprocess.PIPE, text=True)


async def _publish(url: str, subject: str, count: int, dataset: str) -> None:
    import msgpack
    import nats
    import zstandard

    from wirepipe.datasets import get_dataset

    compress = zstandard.ZstdCompressor(level=1).compress
    payloads = [compress(msgpack.packb(r)) for chunk in get_dataset(dataset).records(count, 0, 1000) for r in chunk]
    nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
    base = {Header.CONTENT_TYPE: "application/msgpack", Header.CONTENT_ENCODING: "zstd"}
    for p in payloads:
        await nc.publish(subject, p, headers={**base, Header.SENT_AT: str(time.time_ns())})
    await nc.flush(timeout=60)
    await nc.close()
    print("done", flush=True)


def report(title: str, results: dict[str, Result], wirepipe: str, hand: str, target: float = 0.9) -> float:
    from wirepipe.core.table import Table

    print()
    print(Table(title, ["variant", "best rec/s", "median rec/s", "MB/s"],
                [[r.name, f"{r.best:,.0f}", f"{statistics.median(r.rates):,.0f}", f"{max(r.mbps):.2f}"]
                 for r in results.values()]).text(elsewhere=None), end="")
    ratio = results[wirepipe].best / results[hand].best
    med = statistics.median(results[wirepipe].rates) / statistics.median(results[hand].rates)
    print(f"ratio wirepipe / hand-written: {ratio:.3f} (best), {med:.3f} (median); target >= {target}")
    for r in results.values():
        if r.latency:
            lat = r.latency
            print(f"latency {r.name:<26} p50 {lat['p50_us']:>9,.0f} us  p90 {lat['p90_us']:>9,.0f} us  "
                  f"p99 {lat['p99_us']:>9,.0f} us  (subscriber {lat['msgs_per_s']:,.0f} msgs/s, "
                  f"{lat['mb_per_s']:.2f} MB/s, {lat['received']:,} received)")
    return ratio


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "subscribe":
    asyncio.run(_subscribe(sys.argv[2], sys.argv[3], int(sys.argv[4])))
if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "publish":
    asyncio.run(_publish(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
