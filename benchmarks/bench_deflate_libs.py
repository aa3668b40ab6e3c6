"""stdlib zlib vs zlib-ng vs ISA-L (``isal``) behind wirepipe's zlib, gzip and deflate codecs.

Per dataset (``point``, ``block``, ``large_vectors``; each record serialized with msgpack, as
wirepipe serializes it), per level (fastest 1, default 6, best 9) and direction, every installed
library compresses each record on its own (as the ``compress`` operator does) through the function
the codec builds (``deflate_compressor(level, wbits, library)``), and inflates stdlib zlib's output
of them (the bytes any peer sends; ``deflate_decompressor``). ``wirepipe`` is the codec itself: the
library it picks by level and payload size (``deflate_rule``, ``deflate_choice``). ISA-L compresses at its own levels
1-3 only (its 0 is not zlib's stored level), so it is timed at ``fastest`` alone.

Before anything is timed, every library's output is inflated by every library and by stdlib
``zlib.decompress`` and must give the records back byte for byte: the bytes stay standard.
Variants run in interleaved rounds in one process; MB/s is msgpack bytes per second of the best
round, ``x`` the median over rounds of the speed ratio against stdlib zlib, ``size`` the output
against zlib's at that level. A sweep over payload sizes (block records cut to N bytes) shows where
each rule's small-payload limit lies (``deflate_rule``: under it a cheaper set-up wins).

    python benchmarks/bench_deflate_libs.py [--rounds 5] [--scale 1] [--container zlib] [--no-sweep]
        [--levels fastest,default,best] [--datasets point,block,large_vectors]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import Result, interleave, ratio
from wirepipe.codecs.compression import get_codec
from wirepipe.codecs.deflate import (
    deflate_choice,
    deflate_compressor,
    deflate_decompressor,
    deflate_installed,
    deflate_library,
)
from wirepipe.codecs.formats import FORMATS
from wirepipe.core.table import Table
from wirepipe.datasets import get_dataset

COUNTS = {"point": 20_000, "block": 100, "large_vectors": 2}  # ~0.14, ~1 and ~1 MB of msgpack
LEVELS = {"fastest": 1, "default": 6, "best": 9}
WBITS = {"zlib": 15, "gzip": 31, "deflate": -15}
SWEEP = (64, 256, 512, 1024, 2048, 4096, 8192)
CAP = 64 << 20


def compresses(library: str, level: int) -> bool:
    return library != "isal" or 1 <= level <= 3


def each(fn: Callable[[bytes], bytes], payloads: list[bytes]) -> Callable[[], int]:
    def run() -> int:
        for p in payloads:
            fn(p)
        return len(payloads)

    return run


def check_standard(payloads: list[bytes], outputs: dict[str, list[bytes]], wbits: int, libs: list[str]) -> None:
    """Every library's output, inflated by every library and by stdlib zlib, is the records, byte for byte."""
    for writer, outs in outputs.items():
        assert [zlib.decompress(o, wbits) for o in outs] == payloads, f"stdlib zlib on {writer}'s output"
        for reader in libs:
            inflate = deflate_decompressor("bench", CAP, wbits, reader)
            assert [inflate(o) for o in outs] == payloads, f"{reader} on {writer}'s output"


def measure(payloads: list[bytes], container: str, level: int, rounds: int,
            libs: list[str]) -> tuple[dict[str, Result], dict[str, Result], dict[str, int]]:
    """(compress results, decompress results, bytes out per writer) for one level, wirepipe's codec included."""
    wbits = WBITS[container]
    codec = get_codec(container)
    writers = {lib: deflate_compressor(level, wbits, lib) for lib in libs if compresses(lib, level)}
    writers["wirepipe"] = codec.compressor(level)
    outputs = {name: [fn(p) for p in payloads] for name, fn in writers.items()}
    check_standard(payloads, outputs, wbits, libs)
    sent = outputs["zlib"]
    readers = {lib: deflate_decompressor("bench", CAP, wbits, lib) for lib in libs}
    readers["wirepipe"] = codec.decompressor(CAP)
    comp = interleave({name: each(fn, payloads) for name, fn in writers.items()}, rounds=rounds)
    decomp = interleave({name: each(fn, sent) for name, fn in readers.items()}, rounds=rounds)
    return comp, decomp, {name: sum(map(len, outs)) for name, outs in outputs.items()}


def mbps(r: Result, nbytes: int) -> float:
    return nbytes / r.best / 1e6


def picked(direction: str, level: int, payloads: list[bytes]) -> str:
    """The library wirepipe ran on these payloads (both, when their sizes straddle the limit)."""
    return "/".join(sorted({deflate_library(direction, level, len(p)) for p in payloads}))


def table(datasets: dict[str, list[bytes]], container: str, rounds: int, libs: list[str],
          levels: dict[str, int]) -> None:
    others = [lib for lib in libs if lib != "zlib"]
    head = ["dataset", "level", "direction", "zlib MB/s", *others, "wirepipe ran"]
    rows = []
    for dataset, payloads in datasets.items():
        nbytes = sum(map(len, payloads))
        for level_name, level in levels.items():
            comp, decomp, sizes = measure(payloads, container, level, rounds, libs)
            for direction, res in (("compress", comp), ("decompress", decomp)):
                cells = [dataset, f"{level_name} ({level})", direction, f"{mbps(res['zlib'], nbytes):,.1f}"]
                for lib in others:
                    if lib not in res:
                        cells.append("n/a")
                        continue
                    cell = f"{ratio(res, lib, 'zlib'):.2f}x"
                    if direction == "compress":
                        cell += f", size {sizes[lib] / sizes['zlib']:.2f}"
                    cells.append(cell)
                ran = picked(direction, level, payloads)
                cells.append(f"{ran} {ratio(res, 'wirepipe', 'zlib'):.2f}x")
                rows.append(cells)
    print(Table("", head, rows, [False] * 3 + [True] * (len(head) - 3)).markdown(), end="")


def sweep(blocks: list[bytes], container: str, rounds: int, libs: list[str]) -> None:
    """Speed against stdlib zlib by payload size: block records cut to N bytes."""
    others = [lib for lib in libs if lib != "zlib"]
    cols = [(d, lvl, lib) for d, lvl in (("compress", 1), ("compress", 3), ("compress", 6), ("compress", 9),
                                         ("decompress", 6))
            for lib in others if d == "decompress" or compresses(lib, lvl)]
    print(f"\nby payload size: block records cut to N bytes, {container} container, speed vs stdlib zlib "
          f"(median of {rounds} rounds): where each rule's small-payload limit lies")
    head = ["bytes", *(f"{'c' if d == 'compress' else 'd'}{lvl if d == 'compress' else ''} {lib}"
                       for d, lvl, lib in cols)]
    rows = []
    wbits = WBITS[container]
    for size in SWEEP:
        payloads = [b[:size] for b in blocks] * max(1, 100_000 // (size * len(blocks)))
        cells = [str(size)]
        for d, lvl, lib in cols:
            if d == "compress":
                fns = {x: deflate_compressor(lvl, wbits, x) for x in ("zlib", lib)}
                res = interleave({x: each(fn, payloads) for x, fn in fns.items()}, rounds=rounds)
            else:
                sent = [deflate_compressor(lvl, wbits, "zlib")(p) for p in payloads]
                fns = {x: deflate_decompressor("bench", CAP, wbits, x) for x in ("zlib", lib)}
                res = interleave({x: each(fn, sent) for x, fn in fns.items()}, rounds=rounds)
            cells.append(f"{ratio(res, lib, 'zlib'):.2f}x")
        rows.append(cells)
    print(Table("", head, rows).markdown(), end="")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="record counts times this")
    ap.add_argument("--container", choices=list(WBITS), default="zlib")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--levels", default="fastest,default,best", help="names or numbers, comma-separated")
    ap.add_argument("--datasets", default=",".join(COUNTS), help="of " + ", ".join(COUNTS))
    args = ap.parse_args()
    levels = {name: LEVELS[name] if name in LEVELS else int(name) for name in args.levels.split(",")}
    names = args.datasets.split(",")
    libs = deflate_installed()
    encode: Any = FORMATS["msgpack"].encoder()
    datasets = {name: [encode(r) for r in get_dataset(name).sample(max(1, int(n * args.scale)))]
                for name, n in COUNTS.items() if name in names or (name == "block" and not args.no_sweep)}
    sizes = ", ".join(f"{name} {len(p):,} records, {sum(map(len, p)) / 1e6:.2f} MB (median "
                      f"{statistics.median(map(len, p)):,.0f} B)" for name, p in datasets.items())
    print(f"libraries: {', '.join(libs)}; {args.container} container, {args.rounds} rounds; {sizes}")
    print(f"wirepipe runs: {deflate_choice()}\n")
    table({k: v for k, v in datasets.items() if k in names}, args.container, args.rounds, libs, levels)
    if not args.no_sweep:
        sweep(datasets["block"], args.container, args.rounds, libs)


if __name__ == "__main__":
    main()
