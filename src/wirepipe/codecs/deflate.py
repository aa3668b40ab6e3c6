"""The zlib family (zlib, gzip, raw deflate): which library runs, by direction, level and payload size, and
the two functions built on it.

Every library writes and reads standard deflate, zlib and gzip, so the choice is speed alone: the fastest
installed as benchmarks/bench_deflate_libs.py measured them (docs/performance/index.md has the figures).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

from .capped import Fn, bomb, corrupt

# A rule is (libraries for payloads under LIMIT bytes, LIMIT, libraries for the others), fastest first.
# Under a few hundred bytes a call is mostly setting up the stream, and stdlib zlib's set-up is the
# cheapest but at level 1: on 7-byte points zlib-ng compressed 0.6-0.66x as fast as zlib at levels 3-9
# and ISA-L inflated 0.55-0.6x as fast. Past the limit ISA-L compresses fastest at its levels 1-3 (3.5-7x
# zlib at level 1, and 12-35% smaller than zlib-ng's level 1, a faster strategy with larger output; its
# level 0 is not zlib's stored level, so it never runs at 0), zlib-ng at the others (1.7-4.4x at level 6;
# at 9 a tie with zlib on block, 4.5x on large_vectors), and ISA-L inflates fastest (1.7-1.9x, zlib-ng
# 1.4-1.6x). Levels 0, 4-5 and 7-8 were measured on block and large_vectors only: level 6's limit.
_Rule = tuple[tuple[str, ...], int, tuple[str, ...]]
_COMPRESS: dict[int, _Rule] = {
    1: (("zlib_ng", "zlib"), 512, ("isal", "zlib_ng", "zlib")),
    2: (("zlib",), 64, ("isal", "zlib_ng", "zlib")),
    3: (("zlib",), 64, ("isal", "zlib_ng", "zlib")),
    9: (("zlib",), 512, ("zlib_ng", "zlib")),
}
_COMPRESS_OTHERWISE: _Rule = (("zlib",), 256, ("zlib_ng", "zlib"))  # levels 0 and 4-8
_DECOMPRESS: _Rule = (("zlib",), 512, ("isal", "zlib_ng", "zlib"))
DEFLATE_LIBRARIES = ("zlib", "zlib_ng", "isal")  # the Python modules: stdlib zlib, zlib-ng, ISA-L


def _installed(libraries: tuple[str, ...]) -> str:
    return next(lib for lib in libraries if lib == "zlib" or _has(lib))


def deflate_installed() -> list[str]:
    """The deflate libraries this process can run (stdlib zlib always)."""
    return [lib for lib in DEFLATE_LIBRARIES if lib == "zlib" or _has(lib)]


def deflate_rule(direction: str, level: int = 6) -> tuple[str, int, str]:
    """(library under ``limit`` bytes, ``limit``, library for the others) that ``direction``
    (``compress``/``decompress``) runs at ``level``, each the first installed of the measured order."""
    small, limit, large = _DECOMPRESS if direction == "decompress" else _COMPRESS.get(level, _COMPRESS_OTHERWISE)
    return _installed(small), limit, _installed(large)


def deflate_library(direction: str, level: int = 6, size: int | None = None) -> str:
    """The library that runs ``direction`` at ``level`` on a payload of ``size`` bytes (None: a large one).

    Every one writes and reads standard deflate, zlib and gzip: any zlib reads the bytes (they
    may differ from zlib's own at the same level), whichever library wrote them.

    >>> import zlib
    >>> from wirepipe.codecs.compression import get_codec
    >>> deflate_library("compress", 9, size=7)  # a tiny payload: stdlib zlib's set-up is the cheapest
    'zlib'
    >>> codec = get_codec("zlib")
    >>> for data in (b"tiny", bytes(range(256)) * 64):  # under every rule's limit, and past it
    ...     for level in range(10):
    ...         packed = codec.compressor(level)(data)
    ...         assert zlib.decompress(packed) == data == codec.decompressor()(packed), level
    """
    small, limit, large = deflate_rule(direction, level)
    return small if size is not None and size < limit else large


def deflate_choice() -> str:
    """Which library runs when, in one line (what a benchmark's output names)."""
    def says(rule: tuple[str, int, str]) -> str:
        small, limit, large = rule
        return large if small == large else f"{large} ({small} under {limit} B)"

    by_rule: dict[str, list[int]] = {}
    for level in range(10):
        by_rule.setdefault(says(deflate_rule("compress", level)), []).append(level)
    compress = ", ".join(f"{_levels(levels)} {text}" for text, levels in by_rule.items())
    return f"compress: {compress}; decompress: {says(deflate_rule('decompress'))}"


def _levels(levels: list[int]) -> str:
    """[0, 4, 5, 6, 7, 8] -> 'levels 0, 4-8'."""
    runs: list[list[int]] = []
    for level in levels:
        if runs and level == runs[-1][-1] + 1:
            runs[-1].append(level)
        else:
            runs.append([level])
    text = ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
    return ("levels " if len(levels) > 1 else "level ") + text


def _has(name: str) -> bool:
    return find_spec(name) is not None


def _zlib_module(library: str) -> Any:
    if library == "isal":
        from isal import isal_zlib

        return isal_zlib
    if library == "zlib_ng":
        from zlib_ng import zlib_ng

        return zlib_ng
    import zlib

    return zlib


def _compress_call(module: Any) -> Callable[[bytes, int, int], bytes]:
    """``compress(data, level, wbits)`` of a zlib-like module (stdlib ``zlib.compress`` takes wbits from 3.11)."""
    if sys.version_info >= (3, 11) or module.__name__ != "zlib":
        return module.compress

    def compress_310(data: bytes, level: int, wbits: int) -> bytes:
        c = module.compressobj(level, module.DEFLATED, wbits)
        return c.compress(data) + c.flush()

    return compress_310


def deflate_compressor(level: int, wbits: int, library: str | None = None) -> Fn:
    """``compress(data)`` of the zlib family (``wbits``: 15 zlib, 31 gzip, -15 raw deflate) at ``level``,
    by the measured rule (``deflate_rule``), or by ``library`` alone (what the benchmark times)."""
    small_lib, limit, large_lib = (library, 0, library) if library else deflate_rule("compress", level)
    compress_large = _compress_call(_zlib_module(large_lib))
    if small_lib == large_lib:
        return lambda data: compress_large(data, level, wbits)
    compress_small = _compress_call(_zlib_module(small_lib))
    return lambda data: (compress_small if len(data) < limit else compress_large)(data, level, wbits)


def deflate_decompressor(name: str, cap: int, wbits: int, library: str | None = None) -> Fn:
    """``decompress(data)`` of the zlib family, capped at ``cap`` bytes of output, by the measured
    rule (``deflate_rule``) or by ``library`` alone; errors name the codec ``name``."""
    small_lib, limit, large_lib = (library, 0, library) if library else deflate_rule("decompress")
    small, large = _zlib_module(small_lib), _zlib_module(large_lib)
    new_small, new_large = small.decompressobj, large.decompressobj
    zerrors = (small.error, large.error)

    def decompress(data: bytes) -> bytes:
        d = (new_small if len(data) < limit else new_large)(wbits)
        try:
            out = d.decompress(data, cap)
        except zerrors as exc:
            raise corrupt(name, str(exc)) from None
        if d.unconsumed_tail:
            raise bomb(name, cap)
        if not d.eof:
            raise corrupt(name, "truncated stream (end of data before end of stream)")
        if d.unused_data:
            raise corrupt(name, f"{len(d.unused_data)} trailing bytes after the end of the stream")
        return out

    return decompress


def zlib_family(name: str, wbits: int) -> tuple[Callable[[int, bytes | None], Fn], Callable[[int, bytes | None], Fn]]:
    """The codec ``name``'s two function builders (``wbits``: its framing), for its registry entry."""
    def make_compress(level: int, _dictionary: bytes | None) -> Fn:
        return deflate_compressor(level, wbits)

    def make_decompress(cap: int, _dictionary: bytes | None) -> Fn:
        return deflate_decompressor(name, cap, wbits)

    return make_compress, make_decompress
