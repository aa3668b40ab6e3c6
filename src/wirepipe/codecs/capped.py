"""Every decompressor's cap, and the codecs whose two functions are small: bz2 and xz (one incremental shape),
lz4, brotli, snappy and none.

A decompressor is built with ``max_output_size``: output past it is refused as a decompression bomb
(``bomb``) before it is allocated, never after; a stream that is not one is refused as corrupt (``corrupt``).
zstd (``zstd.py``: dictionaries, frames) and the zlib family (``deflate.py``: which library runs) build
theirs on the same two refusals; ``compression.py`` registers them all.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.errors import RefusedError, StageError
from .varints import read_varint

Fn = Callable[[bytes], bytes]  # a built compress or decompress function


def bomb(codec: str, cap: int) -> RefusedError:
    """The refusal of output past ``cap`` bytes."""
    return RefusedError(
        "decompress",
        codec,
        f"output exceeds max_output_size ({cap} bytes): refused as a possible decompression bomb",
    )


def corrupt(codec: str, reason: str) -> StageError:
    """The refusal of a payload ``codec`` cannot decompress."""
    return StageError("decompress", codec, reason)


# --- bz2 and xz share the incremental decompressor shape -----------------------------------------


def _capped(name: str, cap: int, new: Callable[[], object], errors: tuple[type[BaseException], ...]) -> Fn:
    def decompress(data: bytes) -> bytes:
        d = new()
        try:
            out = d.decompress(data, max_length=cap)  # type: ignore[attr-defined]
        except errors as exc:
            raise corrupt(name, str(exc) or type(exc).__name__) from None
        if not d.eof:  # type: ignore[attr-defined]
            if len(out) >= cap:
                raise bomb(name, cap)
            raise corrupt(name, "truncated stream (end of data before end of stream)")
        if d.unused_data:  # type: ignore[attr-defined]
            raise corrupt(name, f"{len(d.unused_data)} trailing bytes after the end of the stream")  # type: ignore[attr-defined]
        return out

    return decompress


def bz2_compress(level: int, _d: bytes | None) -> Fn:
    import bz2

    return lambda data: bz2.compress(data, level)


def bz2_decompress(cap: int, _d: bytes | None) -> Fn:
    import bz2

    return _capped("bz2", cap, bz2.BZ2Decompressor, (OSError, ValueError, EOFError))


def xz_compress(level: int, _d: bytes | None) -> Fn:
    import lzma

    return lambda data: lzma.compress(data, format=lzma.FORMAT_XZ, preset=level)


def xz_decompress(cap: int, _d: bytes | None) -> Fn:
    import lzma

    return _capped("xz", cap, lambda: lzma.LZMADecompressor(format=lzma.FORMAT_XZ), (lzma.LZMAError, EOFError))


# --- lz4 ------------------------------------------------------------------------------------


def lz4_compress(level: int, _d: bytes | None) -> Fn:
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


def lz4_decompress(cap: int, _d: bytes | None) -> Fn:
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
                raise corrupt("lz4", str(exc)) from None
        else:
            limit = declared if 0 <= declared <= cap else cap
            d = Decompressor()
            try:
                out = d.decompress(data, max_length=limit)
            except (RuntimeError, ValueError, EOFError) as exc:
                raise corrupt("lz4", str(exc) or type(exc).__name__) from None
            if not d.eof:
                if len(out) < limit:
                    raise corrupt("lz4", "truncated stream (end of data before end of stream)")
                if limit == declared:
                    raise corrupt("lz4", f"the frame holds more than the {declared} bytes its header declares")
                raise bomb("lz4", cap)
            if d.unused_data:
                raise corrupt("lz4", f"{len(d.unused_data)} trailing bytes after the end of the stream")
        if 0 <= declared != len(out):
            raise corrupt("lz4", f"the frame holds {len(out)} bytes, its header declares {declared}")
        return out

    return decompress


# --- brotli ---------------------------------------------------------------------------------


def brotli_compress(level: int, _d: bytes | None) -> Fn:
    import brotli

    compress = brotli.compress
    return lambda data: compress(data, quality=level)


def brotli_decompress(cap: int, _d: bytes | None) -> Fn:
    import brotli

    Decompressor = brotli.Decompressor
    error = brotli.error

    def decompress(data: bytes) -> bytes:
        d = Decompressor()
        try:
            out = d.process(data, output_buffer_limit=cap)
        except error as exc:
            raise corrupt("brotli", str(exc) or "corrupt stream") from None
        if not d.is_finished():
            if len(out) >= cap:
                raise bomb("brotli", cap)
            raise corrupt("brotli", "truncated stream (end of data before end of stream)")
        return out

    return decompress


# --- snappy (the framing format: CRC-32C per chunk), via cramjam -------------------------------------

_SNAPPY_STREAM = b"\xff\x06\x00\x00sNaPpY"


def snappy_compress(_level: int, _d: bytes | None) -> Fn:
    import cramjam

    compress = cramjam.snappy.compress
    # cramjam frames an empty payload as b"", which is no stream: the framing format's empty stream is the
    # stream identifier alone (what python-snappy and Go's snappy writer produce), so a peer can read it.
    return lambda data: bytes(compress(data)) if data else _SNAPPY_STREAM


def _snappy_size(data: bytes) -> int:
    """Uncompressed size of a snappy framed stream, from its chunk headers (nothing is inflated)."""
    if not data.startswith(_SNAPPY_STREAM):
        raise corrupt("snappy", "not a snappy framed stream (no stream identifier)")
    pos, total, n = 0, 0, len(data)
    while pos < n:
        if pos + 4 > n:
            raise corrupt("snappy", "truncated chunk header")
        kind = data[pos]
        length = int.from_bytes(data[pos + 1:pos + 4], "little")
        body = pos + 4
        if body + length > n:
            raise corrupt("snappy", "truncated stream (end of data inside a chunk)")
        if kind == 0x00:  # compressed: CRC (4 bytes) then a snappy block that starts with its size (a varint)
            total += read_varint(data[body + 4:body + length], 0, 5, "snappy", "decompress")[0]
        elif kind == 0x01:
            total += max(length - 4, 0)
        elif 0x02 <= kind <= 0x7F:
            raise corrupt("snappy", f"reserved chunk type {kind:#x}")
        pos = body + length
    return total


def snappy_decompress(cap: int, _d: bytes | None) -> Fn:
    import cramjam

    decompress = cramjam.snappy.decompress
    error = cramjam.DecompressionError

    def decompress_capped(data: bytes) -> bytes:
        # b"" (what cramjam itself frames an empty payload as) is refused like any stream without its
        # identifier: a message cut to nothing must not read as an empty record.
        if _snappy_size(data) > cap:
            raise bomb("snappy", cap)
        try:
            return bytes(decompress(data))
        except error as exc:
            raise corrupt("snappy", str(exc) or "corrupt stream") from None

    return decompress_capped


# --- none -----------------------------------------------------------------------------------


def none_compress(_level: int, _d: bytes | None) -> Fn:
    return bytes


def none_decompress(cap: int, _d: bytes | None) -> Fn:
    def identity(data: bytes) -> bytes:
        if len(data) > cap:
            raise RefusedError("decompress", "none", f"payload of {len(data)} bytes exceeds max_output_size ({cap})")
        return data

    return identity
