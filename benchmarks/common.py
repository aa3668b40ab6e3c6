"""Shared helpers for benchmarks: interleaved rounds in one process, ratios, a table of them.

Timings on shared 2-core machines swing 2-3x between runs, so every benchmark runs the
wirepipe variant and the hand-written baseline alternately in the same process, several
rounds, and reports the median of per-round ratios next to the best absolute figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Result:
    name: str
    records: int
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # the process's CPU time (every thread), per round

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def rate(self) -> float:
        return self.records / self.best


def interleave(variants: dict[str, Callable[[], int]], rounds: int = 5, warmup: bool = True,
               rotate: bool = False) -> dict[str, Result]:
    """Run each variant once per round, alternating; each returns the number of records it did. Wall clock and
    the process's CPU time are both kept. ``rotate`` starts each round with the next variant, so none always
    runs first (after the same other one) on a machine whose speed drifts."""
    results: dict[str, Result] = {name: Result(name, 0) for name in variants}
    if warmup:
        for fn in variants.values():
            fn()
    items = list(variants.items())
    for r in range(rounds):
        shift = r % len(items) if rotate else 0
        for name, fn in items[shift:] + items[:shift]:
            c0, t0 = time.process_time(), time.perf_counter()
            n = fn()
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            result = results[name]
            result.records = n
            result.seconds.append(dt)
            result.cpu_seconds.append(cpu)
    return results


def ratio(results: dict[str, Result], a: str, b: str) -> float:
    """Median over rounds of rate(a) / rate(b) (> 1 means a is faster)."""
    ra, rb = results[a], results[b]
    return statistics.median(tb / ta for ta, tb in zip(ra.seconds, rb.seconds, strict=False))


def print_table(title: str, results: dict[str, Result], baseline: str) -> None:
    """Each variant's best rate and its median ratio to ``baseline``, as a table that fits the terminal."""
    from wirepipe.core.table import Table

    rows = [[name, f"{r.rate:,.0f}", f"{ratio(results, name, baseline):.3f}"] for name, r in results.items()]
    print()
    caption = f"ratio: the median over rounds of the variant's rate / {baseline}'s (> 1: faster)"
    print(Table(title, ["variant", "records/s (best)", "ratio"], rows, caption=caption).text(elsewhere=None), end="")


def pack_and_compress(chunks: list[list[object]], level: int = 1, by_stage: bool = False) -> int:
    """The hand-written chain: ``[compress(pack(r)) for r in chunk]`` over each chunk (msgpack's ``Packer``,
    zstandard's compressor at ``level``); the records it encoded. ``by_stage`` runs it a stage at a time, as a
    pipeline does: ``[compress(p) for p in [pack(r) for r in chunk]]`` (each C loop stays hot in the CPU's
    caches: ~15% faster on point records)."""
    import msgpack
    import zstandard

    pack = msgpack.Packer(use_bin_type=True).pack
    compress = zstandard.ZstdCompressor(level=level).compress
    n = 0
    if by_stage:
        for chunk in chunks:
            out = [compress(p) for p in [pack(r) for r in chunk]]
            n += len(out)
        return n
    for chunk in chunks:
        out = [compress(pack(r)) for r in chunk]
        n += len(out)
    return n
