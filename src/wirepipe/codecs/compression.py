"""Compression codecs: one registry, one level vocabulary, one size cap on every decompressor.

A codec turns into two plain functions, ``compress(bytes) -> bytes`` and
``decompress(bytes) -> bytes``, built once per operator so the per-record cost is the
library call. Levels are ``fastest``, ``default`` (what the library does when you
don't say), ``best`` or an integer inside the codec's own range.

Every decompressor is built with ``max_output_size``: output past it is refused as a
decompression bomb before it is allocated, never after (``capped.py``). The codecs' functions live
by family: ``zstd.py`` (and its dictionaries), ``deflate.py`` (zlib, gzip, deflate: which library
runs), ``capped.py`` (bz2, xz, lz4, brotli, snappy, none); this module registers them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.registry import Registry, install_hint, library_installed
from .capped import (
    Fn,
    brotli_compress,
    brotli_decompress,
    bz2_compress,
    bz2_decompress,
    lz4_compress,
    lz4_decompress,
    none_compress,
    none_decompress,
    snappy_compress,
    snappy_decompress,
    xz_compress,
    xz_decompress,
)
from .deflate import zlib_family
from .zstd import zstd_compress, zstd_decompress

DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024
LEVEL_NAMES = ("fastest", "default", "best")  # the level vocabulary every codec speaks, besides its integers


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


_DEFLATE_NOTE = "zlib-ng / isal where installed and measured faster (standard bytes)"
_zlib = zlib_family("zlib", 15)
_gzip = zlib_family("gzip", 31)
_deflate = zlib_family("deflate", -15)

CODECS: Registry[Codec] = Registry("wirepipe.codecs", {
    c.name: c
    for c in (
        Codec("zstd", "zstandard", "zstd", 1, 3, 19, -131072, 22, zstd_compress, zstd_decompress,
              supports_dictionary=True,
              note="best = 19 (highest without --ultra); 20..22 by number"),
        Codec("zlib", "zlib", "zlib", 1, 6, 9, 0, 9, *_zlib, note=_DEFLATE_NOTE),
        Codec("gzip", "zlib", "gzip", 1, 6, 9, 0, 9, *_gzip, note=_DEFLATE_NOTE),
        Codec("deflate", "zlib", "deflate", 1, 6, 9, 0, 9, *_deflate,
              note="raw deflate, no zlib header; " + _DEFLATE_NOTE),
        Codec("brotli", "brotli", "br", 0, 11, 11, 0, 11, brotli_compress, brotli_decompress, aliases=("br",),
              extra="brotli"),
        Codec("bz2", "bz2", "bzip2", 1, 9, 9, 1, 9, bz2_compress, bz2_decompress, aliases=("bzip2", "bz")),
        Codec("xz", "lzma", "xz", 0, 6, 9, 0, 9, xz_compress, xz_decompress, aliases=("lzma",)),
        Codec("lz4", "lz4", "lz4", 0, 0, 16, 0, 16, lz4_compress, lz4_decompress, note="lz4 frame format",
              extra="lz4"),
        Codec("snappy", "cramjam", "snappy", 0, 0, 0, 0, 0, snappy_compress, snappy_decompress,
              extra="snappy", note="snappy framing format (CRC-32C per chunk), via cramjam; no levels"),
        Codec("none", "", "identity", 0, 0, 0, 0, 0, none_compress, none_decompress, aliases=("identity",)),
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
