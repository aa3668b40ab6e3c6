"""Compression codecs: one registry, one level vocabulary, one size cap on every decompressor.

A codec turns into two plain functions, ``compress(bytes) -> bytes`` and
``decompress(bytes) -> bytes``, built once per operator so the per-record cost is the
library call. Levels are ``fastest``, ``default`` (what the library does when you
don't say), ``best`` or an integer inside the codec's own range.

Every decompressor is built with ``max_output_size``: output past it is refused as a
decompression bomb before it is allocated, never after.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.util import find_spec
from typing import Any

from ..core.errors import RefusedError, StageError
from ..core.registry import Registry, install_hint, library_installed
from .varints import read_varint

Fn = Callable[[bytes], bytes]
DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024
LEVEL_NAMES = ("fastest", "default", "best")


@dataclass(frozen=True)
class Codec:
    """A compression codec: its levels, its wire name and how to build its two functions."""

    name: str
    library: str
    content_encoding: str
    fastest: int
    default: int
    best: int
    min_level: int
    max_level: int
    make_compress: Callable[[int, bytes | None], Fn] = field(repr=False)
    make_decompress: Callable[[int, bytes | None], Fn] = field(repr=False)
    aliases: tuple[str, ...] = ()
    supports_dictionary: bool = False
    note: str = ""
    extra: str = ""  # the pip extra that installs its library (wirepipe[extra]); "" for the core

    def available(self) -> bool:
        return library_installed(self.library)

    def require(self) -> None:
        """``ValueError`` naming the extra to install when the codec's library is missing."""
        if not self.available():
            raise ValueError(f"codec {self.name} needs {self.library}, which is not installed: "
                             f"{install_hint(self.extra)}")

    def level_help(self) -> str:
        return (
            f"fastest ({self.fastest}), default ({self.default}), best ({self.best}) "
            f"or an integer {self.min_level}..{self.max_level}"
        )

    def resolve_level(self, level: str | int | None) -> int:
        """The integer level for ``level``; ``ValueError`` naming the codec's range otherwise."""
        if level is None or level == "default":
            return self.default
        if level == "fastest":
            return self.fastest
        if level == "best":
            return self.best
        if isinstance(level, bool):
            raise ValueError(f"{level!r} is not a level for {self.name}: use {self.level_help()}")
        if isinstance(level, str):
            try:
                level = int(level)
            except ValueError:
                raise ValueError(
                    f"{level!r} is not a level for {self.name}: use {self.level_help()}"
                ) from None
        if not isinstance(level, int) or not self.min_level <= level <= self.max_level:
            raise ValueError(f"{level!r} is out of range for {self.name}: use {self.level_help()}")
        return level

    def compressor(self, level: str | int | None = None, dictionary: bytes | None = None) -> Fn:
        self.require()
        self._check_dictionary(dictionary)
        return self.make_compress(self.resolve_level(level), dictionary)

    def decompressor(self, max_output_size: int = DEFAULT_MAX_OUTPUT, dictionary: bytes | None = None) -> Fn:
        self.require()
        self._check_dictionary(dictionary)
        return self.make_decompress(max_output_size, dictionary)

    def _check_dictionary(self, dictionary: bytes | None) -> None:
        if dictionary is not None and not self.supports_dictionary:
            raise ValueError(f"codec {self.name} does not take a dictionary (only zstd does)")


def _bomb(codec: str, cap: int) -> RefusedError:
    return RefusedError(
        "decompress",
        codec,
        f"output exceeds max_output_size ({cap} bytes): refused as a possible decompression bomb",
    )


def _bad(codec: str, reason: str) -> StageError:
    return StageError("decompress", codec, reason)


# --- zstd ---------------------------------------------------------------------------------


def _zstd_compress(level: int, dictionary: bytes | None) -> Fn:
    # A dictionary both ends load from a file: the 4-byte dictionary id is not written.
    return zstd_compressor(level, dictionary, write_dict_id=not dictionary)


def zstd_compressor(level: int, dictionary: bytes | None, *, write_dict_id: bool) -> Fn:
    """``compress(data)`` of zstd at ``level`` with ``dictionary``; ``write_dict_id`` puts the dictionary's
    id in every frame's header, so a consumer can find the dictionary by it (a dictionary shared through
    NATS: ``operators/shared_dictionaries.py``).

    A frame compressed with a dictionary carries zstd's content checksum (4 bytes): decompressed with
    other dictionary bytes (one that claims the same id, a file that changed) it fails the checksum
    instead of giving other data. A frame without a dictionary has no second input to mismatch and
    stays 4 bytes smaller (a quarter of a 16-byte ``point`` frame).
    """
    import zstandard

    d = zstandard.ZstdCompressionDict(dictionary) if dictionary else None
    return zstandard.ZstdCompressor(level=level, dict_data=d, write_dict_id=write_dict_id,
                                    write_checksum=d is not None).compress


def _zstd_decompress(cap: int, dictionary: bytes | None) -> Fn:
    import zstandard

    d = zstandard.ZstdCompressionDict(dictionary) if dictionary else None
    dctx = zstandard.ZstdDecompressor(dict_data=d)
    inner = dctx.decompress
    content_size = zstandard.frame_content_size
    ZstdError = zstandard.ZstdError

    def decompress(data: bytes) -> bytes:
        # A frame may declare its size; zstandard would allocate it whatever the cap says.
        try:
            declared = content_size(data)
        except ZstdError as exc:
            raise _bad("zstd", f"not a zstd frame ({exc})") from None
        if declared > cap:
            raise _bomb("zstd", cap)
        try:
            # positional: max_output_size, read_across_frames, allow_extra_data (keywords cost ~100 ns)
            return inner(data, cap, False, False)
        except ZstdError as exc:
            if declared < 0 and "did not decompress full frame" in str(exc):
                raise _bomb("zstd", cap) from None
            raise _bad("zstd", _zstd_reason(str(exc), data, dictionary)) from None

    return decompress


def _zstd_reason(error: str, data: bytes, dictionary: bytes | None) -> str:
    """zstd's error, and which dictionary the frame asks for when that is why it failed."""
    wanted = zstd_frame_dictionary_id(data)
    if not wanted or (dictionary and zstd_dictionary_id(dictionary) == wanted):
        if "checksum" in error:
            return (f"{error}: the frame was decompressed with other dictionary bytes than it was compressed "
                    "with (or it is damaged): refused rather than decoded to other data")
        return error
    return (f"{error}: the frame was compressed with zstd dictionary {wanted}, which this decompressor does not "
            "have (a dictionary shared through NATS: `dictionaries: nats://BUCKET`)")


def zstd_frame_dictionary_id(data: bytes) -> int:
    """The dictionary id a zstd frame's header carries (0: none, or not a zstd frame).

    >>> import zstandard
    >>> zstd_frame_dictionary_id(zstandard.ZstdCompressor().compress(b"abc")), zstd_frame_dictionary_id(b"xyz")
    (0, 0)
    """
    import zstandard

    try:
        return int(zstandard.get_frame_parameters(data).dict_id)
    except zstandard.ZstdError:
        return 0


def zstd_dictionary_id(dictionary: bytes) -> int:
    """The id a trained zstd dictionary declares (0 for raw content, which has none)."""
    import zstandard

    return int(zstandard.ZstdCompressionDict(dictionary).dict_id())


DIGEST_PREFIX = "sha256:"
_DIGEST = re.compile(r"sha256:[0-9a-fA-F]{64}")


def dictionary_digest(dictionary: bytes) -> str:
    """What ``Wirepipe-Dictionary`` carries for a dictionary: ``sha256:`` and the 64 lowercase hex digits of
    the SHA-256 of its exact bytes (an id names a dictionary, the digest proves which bytes).

    >>> dictionary_digest(b"abc")
    'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
    """
    return DIGEST_PREFIX + hashlib.sha256(dictionary).hexdigest()


def parse_dictionary_digest(text: str) -> str:
    """``text`` as a dictionary digest, lowercased; ``ValueError`` saying the form otherwise.

    >>> parse_dictionary_digest("SHA256:" + "AB" * 32) == "sha256:" + "ab" * 32
    True
    >>> parse_dictionary_digest("ab12")
    Traceback (most recent call last):
    ...
    ValueError: 'ab12' is not a dictionary digest: sha256: and the 64 hex digits of the dictionary's SHA-256
    """
    if not isinstance(text, str) or not _DIGEST.fullmatch(text.lower()):
        raise ValueError(f"{text!r} is not a dictionary digest: sha256: and the 64 hex digits of the "
                         "dictionary's SHA-256")
    return text.lower()


def dictionary_size(samples: list[bytes]) -> int:
    """How large a dictionary to train on ``samples``: a tenth of their bytes, within 1-16 KiB (zstd's
    own advice is ~100x smaller than the samples; past 16 KiB small records gain little more)."""
    return min(16384, max(1024, sum(map(len, samples)) // 10))


def train_zstd_dictionary(samples: list[bytes], size: int = 16 * 1024, level: int = 3) -> bytes:
    """Train a zstd dictionary on sample payloads (the serialized records of a dataset).

    Small messages gain most: a dictionary lets each frame refer to what the typical
    record looks like instead of describing it again. Its id is derived from its content,
    so a dictionary trained on other samples has another id.
    """
    import zstandard

    if len(samples) < 8:
        raise ValueError(f"need at least 8 samples to train a zstd dictionary, got {len(samples)}")
    return zstandard.train_dictionary(size, list(samples), level=level).as_bytes()


# --- the zlib family: zlib, gzip, raw deflate -------------------------------------------------


# Which library runs: by direction, level and payload size, the fastest installed as
# benchmarks/bench_deflate_libs.py measured them (docs/performance/index.md has the figures).
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
            raise _bad(name, str(exc)) from None
        if d.unconsumed_tail:
            raise _bomb(name, cap)
        if not d.eof:
            raise _bad(name, "truncated stream (end of data before end of stream)")
        if d.unused_data:
            raise _bad(name, f"{len(d.unused_data)} trailing bytes after the end of the stream")
        return out

    return decompress


def _zlib_family(name: str, wbits: int) -> tuple[Callable[[int, bytes | None], Fn], Callable[[int, bytes | None], Fn]]:
    def make_compress(level: int, _dictionary: bytes | None) -> Fn:
        return deflate_compressor(level, wbits)

    def make_decompress(cap: int, _dictionary: bytes | None) -> Fn:
        return deflate_decompressor(name, cap, wbits)

    return make_compress, make_decompress


# --- bz2 and xz share the incremental decompressor shape -----------------------------------------


def _capped(name: str, cap: int, new: Callable[[], object], errors: tuple[type[BaseException], ...]) -> Fn:
    def decompress(data: bytes) -> bytes:
        d = new()
        try:
            out = d.decompress(data, max_length=cap)  # type: ignore[attr-defined]
        except errors as exc:
            raise _bad(name, str(exc) or type(exc).__name__) from None
        if not d.eof:  # type: ignore[attr-defined]
            if len(out) >= cap:
                raise _bomb(name, cap)
            raise _bad(name, "truncated stream (end of data before end of stream)")
        if d.unused_data:  # type: ignore[attr-defined]
            raise _bad(name, f"{len(d.unused_data)} trailing bytes after the end of the stream")  # type: ignore[attr-defined]
        return out

    return decompress


def _bz2_compress(level: int, _d: bytes | None) -> Fn:
    import bz2

    return lambda data: bz2.compress(data, level)


def _bz2_decompress(cap: int, _d: bytes | None) -> Fn:
    import bz2

    return _capped("bz2", cap, bz2.BZ2Decompressor, (OSError, ValueError, EOFError))


def _xz_compress(level: int, _d: bytes | None) -> Fn:
    import lzma

    return lambda data: lzma.compress(data, format=lzma.FORMAT_XZ, preset=level)


def _xz_decompress(cap: int, _d: bytes | None) -> Fn:
    import lzma

    return _capped("xz", cap, lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ), (lzma.LZMAError, EOFError))


def _lz4_compress(level: int, _d: bytes | None) -> Fn:
    import lz4.frame

    compress = lz4.frame.compress
    return lambda data: compress(data, compression_level=level, store_size=True)


_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_declared_size(data: bytes) -> int:
    """The content size an LZ4 frame header declares (FLG bit 3), or -1."""
    if len(data) >= 15 and data[:4] == _LZ4_MAGIC and data[4] & 0xC8 == 0x48:
        return int.from_bytes(data[6:14], "little")
    return -1


# LZ4 cannot expand data more than ~255 times (a match costs at least one byte per 255 output
# bytes): a frame this many times smaller than the cap cannot pass it, whatever its header says.
_LZ4_MAX_RATIO = 300


def _lz4_decompress(cap: int, _d: bytes | None) -> Fn:
    import lz4.frame

    whole = lz4.frame.decompress
    Decompressor = lz4.frame.LZ4FrameDecompressor
    small = cap // _LZ4_MAX_RATIO

    def decompress(data: bytes) -> bytes:
        # The header's content size is a claim, not a bound (a 0.86 MB frame declaring 1,000 bytes
        # expands to 214 MiB): only frames too small to pass the cap take the one-call path (~2x
        # faster than a decompressor object); the others stream with a bounded output.
        declared = _lz4_declared_size(data)
        if len(data) <= small:
            try:
                out = whole(data)
            except RuntimeError as exc:
                raise _bad("lz4", str(exc)) from None
        else:
            limit = declared if 0 <= declared <= cap else cap
            d = Decompressor()
            try:
                out = d.decompress(data, max_length=limit)
            except (RuntimeError, ValueError, EOFError) as exc:
                raise _bad("lz4", str(exc) or type(exc).__name__) from None
            if not d.eof:
                if len(out) < limit:
                    raise _bad("lz4", "truncated stream (end of data before end of stream)")
                if limit == declared:
                    raise _bad("lz4", f"the frame holds more than the {declared} bytes its header declares")
                raise _bomb("lz4", cap)
            if d.unused_data:
                raise _bad("lz4", f"{len(d.unused_data)} trailing bytes after the end of the stream")
        if 0 <= declared != len(out):
            raise _bad("lz4", f"the frame holds {len(out)} bytes, its header declares {declared}")
        return out

    return decompress


# --- brotli ---------------------------------------------------------------------------------


def _brotli_compress(level: int, _d: bytes | None) -> Fn:
    import brotli

    compress = brotli.compress
    return lambda data: compress(data, quality=level)


def _brotli_decompress(cap: int, _d: bytes | None) -> Fn:
    import brotli

    Decompressor = brotli.Decompressor
    error = brotli.error

    def decompress(data: bytes) -> bytes:
        d = Decompressor()
        try:
            out = d.process(data, output_buffer_limit=cap)
        except error as exc:
            raise _bad("brotli", str(exc) or "corrupt stream") from None
        if not d.is_finished():
            if len(out) >= cap:
                raise _bomb("brotli", cap)
            raise _bad("brotli", "truncated stream (end of data before end of stream)")
        return out

    return decompress


# --- snappy (the framing format: CRC-32C per chunk), via cramjam -------------------------------------

_SNAPPY_STREAM = b"\xff\x06\x00\x00sNaPpY"


def _snappy_compress(_level: int, _d: bytes | None) -> Fn:
    import cramjam

    compress = cramjam.snappy.compress
    # cramjam frames an empty payload as b"", which is no stream: the framing format's empty stream is the
    # stream identifier alone (what python-snappy and Go's snappy writer produce), so a peer can read it.
    return lambda data: bytes(compress(data)) if data else _SNAPPY_STREAM


def _snappy_size(data: bytes) -> int:
    """Uncompressed size of a snappy framed stream, from its chunk headers (nothing is inflated)."""
    if not data.startswith(_SNAPPY_STREAM):
        raise _bad("snappy", "not a snappy framed stream (no stream identifier)")
    pos, total, n = 0, 0, len(data)
    while pos < n:
        if pos + 4 > n:
            raise _bad("snappy", "truncated chunk header")
        kind = data[pos]
        length = int.from_bytes(data[pos + 1:pos + 4], "little")
        body = pos + 4
        if body + length > n:
            raise _bad("snappy", "truncated stream (end of data inside a chunk)")
        if kind == 0x00:  # compressed: CRC (4 bytes) then a snappy block that starts with its size (a varint)
            total += read_varint(data[body + 4:body + length], 0, 5, "snappy", "decompress")[0]
        elif kind == 0x01:
            total += max(length - 4, 0)
        elif 0x02 <= kind <= 0x7F:
            raise _bad("snappy", f"reserved chunk type {kind:#x}")
        pos = body + length
    return total


def _snappy_decompress(cap: int, _d: bytes | None) -> Fn:
    import cramjam

    decompress = cramjam.snappy.decompress
    error = cramjam.DecompressionError

    def decompress_capped(data: bytes) -> bytes:
        # b"" (what cramjam itself frames an empty payload as) is refused like any stream without its
        # identifier: a message cut to nothing must not read as an empty record.
        if _snappy_size(data) > cap:
            raise _bomb("snappy", cap)
        try:
            return bytes(decompress(data))
        except error as exc:
            raise _bad("snappy", str(exc) or "corrupt stream") from None

    return decompress_capped


# --- none -----------------------------------------------------------------------------------


def _none_compress(_level: int, _d: bytes | None) -> Fn:
    return bytes


def _none_decompress(cap: int, _d: bytes | None) -> Fn:
    def identity(data: bytes) -> bytes:
        if len(data) > cap:
            raise RefusedError("decompress", "none", f"payload of {len(data)} bytes exceeds max_output_size ({cap})")
        return data

    return identity


_DEFLATE_NOTE = "zlib-ng / isal where installed and measured faster (standard bytes)"
_zlib = _zlib_family("zlib", 15)
_gzip = _zlib_family("gzip", 31)
_deflate = _zlib_family("deflate", -15)

CODECS: Registry[Codec] = Registry("wirepipe.codecs", {
    c.name: c
    for c in (
        Codec("zstd", "zstandard", "zstd", 1, 3, 19, -131072, 22, _zstd_compress, _zstd_decompress,
              supports_dictionary=True,
              note="best = 19 (highest without --ultra); 20..22 by number"),
        Codec("zlib", "zlib", "zlib", 1, 6, 9, 0, 9, *_zlib, note=_DEFLATE_NOTE),
        Codec("gzip", "zlib", "gzip", 1, 6, 9, 0, 9, *_gzip, note=_DEFLATE_NOTE),
        Codec("deflate", "zlib", "deflate", 1, 6, 9, 0, 9, *_deflate,
              note="raw deflate, no zlib header; " + _DEFLATE_NOTE),
        Codec("brotli", "brotli", "br", 0, 11, 11, 0, 11, _brotli_compress, _brotli_decompress, aliases=("br",),
              extra="brotli"),
        Codec("bz2", "bz2", "bzip2", 1, 9, 9, 1, 9, _bz2_compress, _bz2_decompress, aliases=("bzip2", "bz")),
        Codec("xz", "lzma", "xz", 0, 6, 9, 0, 9, _xz_compress, _xz_decompress, aliases=("lzma",)),
        Codec("lz4", "lz4", "lz4", 0, 0, 16, 0, 16, _lz4_compress, _lz4_decompress, note="lz4 frame format",
              extra="lz4"),
        Codec("snappy", "cramjam", "snappy", 0, 0, 0, 0, 0, _snappy_compress, _snappy_decompress,
              extra="snappy", note="snappy framing format (CRC-32C per chunk), via cramjam; no levels"),
        Codec("none", "", "identity", 0, 0, 0, 0, 0, _none_compress, _none_decompress, aliases=("identity",)),
    )
})


@functools.cache
def _lookups(_generation: int) -> tuple[dict[str, str], dict[str, Codec]]:
    """(alias -> name, Content-Encoding -> codec), rebuilt when a codec is registered."""
    aliases = {alias: c.name for c in CODECS.values() for alias in c.aliases}
    return aliases, {c.content_encoding: c for c in CODECS.values()}


def get_codec(name: str) -> Codec:
    """The codec called ``name`` (or one of its aliases); ``KeyError`` listing the known ones."""
    codec = CODECS.get(name) or CODECS.get(_lookups(CODECS.generation)[0].get(name, ""))
    if codec is None:
        from ..core.models import unknown_message

        raise KeyError(unknown_message("codec", name, CODECS))
    return codec


def codec_for_encoding(content_encoding: str | None) -> Codec:
    """The codec a ``Content-Encoding`` header names (absent means identity)."""
    if not content_encoding:
        return CODECS["none"]
    by_encoding = _lookups(CODECS.generation)[1]
    codec = by_encoding.get(content_encoding.strip().lower())
    if codec is None:
        raise KeyError(f"unknown Content-Encoding {content_encoding!r}: known {', '.join(by_encoding)}")
    return codec
