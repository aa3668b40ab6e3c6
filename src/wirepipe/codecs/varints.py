"""Variable-length integers: LEB128 (protobuf, postcard), zigzag, and bincode 2's tagged varints.

A LEB128 varint writes 7 bits per byte, least significant group first, the high bit set on
every byte but the last; zigzag(n) = (n << 1) ^ (n >> 63) maps 0, -1, 1, -2 ... to 0, 1, 2, 3 ...
so small negative numbers stay short. bincode 2's varint (``config::standard()``) of u is the
byte u when u < 251, else a tag then u little-endian: 251 + u16, 252 + u32, 253 + u64.

Each comes one value at a time (``varint``, ``read_varint``) and a column at a time with numpy
(``varint_matrix``, ``read_varints``): the fixed layouts write and read a batch of fixed-width
records in a few numpy steps. A reader names its format in the ``StageError`` a corrupt or
truncated payload raises.

>>> varint(300).hex(), read_varint(varint(300), 0, 10, "postcard")
('ac02', (300, 2))
>>> [zigzag(n, 32) for n in (0, -1, 1, -2)], bvarint(251).hex()
([0, 1, 2, 3], 'fbfb00')
"""

from __future__ import annotations

import struct
from typing import Any

from ..core.errors import StageError

VARINT_MAX = {"int32": 5, "uint32": 5, "int64": 10}  # the most bytes a LEB128 varint of each kind takes
_U64 = struct.Struct("<Q")


def corrupt(fmt: str, reason: str) -> StageError:
    """The error a payload that cannot be read as ``fmt`` raises (the record is dead-lettered with it)."""
    return StageError("deserialize", fmt, reason)


# --- LEB128 and zigzag ---------------------------------------------------------------------------


def _leb128(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_leb128(i) for i in range(1 << 14)]  # one lookup instead of a loop for values < 16384


def varint(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else _leb128(n)


def read_varint(buf: bytes, pos: int, maxlen: int, fmt: str, stage: str = "deserialize") -> tuple[int, int]:
    """The LEB128 varint at ``pos``, at most ``maxlen`` bytes long: (value, the next position); the
    ``StageError`` of ``stage`` and ``fmt`` when it is cut short or longer."""
    result = shift = 0
    for i in range(maxlen):
        try:
            b = buf[pos + i]
        except IndexError:
            raise StageError(stage, fmt, "truncated: the message ends inside a varint") from None
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    raise StageError(stage, fmt, f"corrupt varint at byte {pos}: longer than {maxlen} bytes")


def zigzag(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def varint_matrix(v: Any, maxlen: int) -> tuple[Any, Any]:
    """Varints of a uint64 array as an (n x maxlen) byte matrix and the mask of the bytes used."""
    import numpy as np

    k = np.arange(maxlen, dtype=np.uint64)
    groups = ((v[:, None] >> (k * np.uint64(7))) & np.uint64(0x7F)).astype(np.uint8)
    lengths = np.ones(len(v), dtype=np.int64)
    for i in range(1, maxlen):
        lengths += v >= np.uint64(1 << (7 * i))
    ki = np.arange(maxlen)
    groups |= ((ki < (lengths - 1)[:, None]) * 0x80).astype(np.uint8)
    return groups, ki < lengths[:, None]


def zigzag_array(a: Any, bits: int) -> Any:
    import numpy as np

    a = a.astype(np.int64)
    return ((a << 1) ^ (a >> 63)).astype(np.uint64) & np.uint64((1 << bits) - 1 if bits < 64 else 2**64 - 1)


def read_varints(buf: bytes, pos: int, count: int, maxlen: int, fmt: str) -> tuple[Any, int]:
    """``count`` varints from ``pos`` as a uint64 array, vectorized; (values, new position)."""
    import numpy as np

    if count == 0:
        return np.zeros(0, dtype=np.uint64), pos
    window = np.frombuffer(buf, dtype=np.uint8, count=min(len(buf) - pos, count * maxlen), offset=pos) \
        if pos <= len(buf) else np.zeros(0, dtype=np.uint8)
    ends = np.flatnonzero(window < 0x80)[:count]
    if len(ends) < count:
        raise corrupt(fmt, f"truncated: {count} varints announced, {len(ends)} present")
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > maxlen:
        raise corrupt(fmt, f"corrupt varint: longer than {maxlen} bytes")
    used = window[: int(ends[-1]) + 1]
    offsets = np.arange(len(used)) - np.repeat(starts, lengths)
    contrib = (used & 0x7F).astype(np.uint64) << (offsets.astype(np.uint64) * np.uint64(7))
    return np.add.reduceat(contrib, starts), pos + int(ends[-1]) + 1


def unzigzag_array(v: Any) -> Any:
    import numpy as np

    return (v >> np.uint64(1)).astype(np.int64) ^ -(v & np.uint64(1)).astype(np.int64)


# --- bincode 2's varints (config::standard()) ------------------------------------------------------
#
# u < 251 is the byte u; else a tag byte then the value little-endian: 251 + u16, 252 + u32,
# 253 + u64 (254 + u128 never occurs here: the widest type is 64-bit). Signed values are zigzagged
# first. The decoder takes the longer forms for small values as bincode's does (251 00 05 reads
# 5), and refuses a tag wider than the field (253 in an i32/u32: bincode's InvalidIntegerType),
# 254 and 255.

U16_TAG, U32_TAG, U64_TAG = 251, 252, 253
MAX_TAG = {"int32": U32_TAG, "uint32": U32_TAG, "int64": U64_TAG}
_ONE_BYTE = [bytes((i,)) for i in range(251)]
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")


def bvarint(n: int) -> bytes:
    """bincode 2's varint of an unsigned ``n`` (< 2**64)."""
    if n < 251:
        return _ONE_BYTE[n]
    if n < 0x10000:
        return b"\xfb" + _U16.pack(n)
    if n < 0x100000000:
        return b"\xfc" + _U32.pack(n)
    return b"\xfd" + _U64.pack(n)


def _bvarint_lengths(max_tag: int) -> bytes:
    """Bytes a varint takes, by its first byte; 0 for a tag the field does not allow."""
    return bytes([1] * 251 + [3, 5, 9][: max_tag - 250] + [0] * (255 - max_tag))


BVARINT_LENGTHS = {tag: _bvarint_lengths(tag) for tag in (U32_TAG, U64_TAG)}


def bad_tag(fmt: str, tag: int, pos: int, max_tag: int) -> StageError:
    wide = "a 64-bit" if max_tag == U64_TAG else "a 32-bit"
    return corrupt(fmt, f"corrupt varint tag {tag} at byte {pos} (0..250 or 251..{max_tag} in {wide} field)")


def read_bvarint(buf: bytes, pos: int, max_tag: int, fmt: str) -> tuple[int, int]:
    try:
        tag = buf[pos]
    except IndexError:
        raise corrupt(fmt, "truncated: the message ends before a varint") from None
    if tag < 251:
        return tag, pos + 1
    size = BVARINT_LENGTHS[max_tag][tag] - 1
    if size < 0:
        raise bad_tag(fmt, tag, pos, max_tag)
    end = pos + 1 + size
    if end > len(buf):
        raise corrupt(fmt, "truncated: the message ends inside a varint")
    return int.from_bytes(buf[pos + 1:end], "little"), end


def bvarint_matrix(u: Any) -> tuple[Any, Any]:
    """bincode 2 varints of a uint64 array as an (n x 9) byte matrix and the mask of the bytes used."""
    import numpy as np

    n = len(u)
    m = np.empty((n, 9), dtype=np.uint8)
    m[:, 1:] = u.astype("<u8").view(np.uint8).reshape(n, 8)
    tag = np.full(n, U64_TAG, dtype=np.uint8)
    tag[u < np.uint64(0x100000000)] = U32_TAG
    tag[u < np.uint64(0x10000)] = U16_TAG
    small = u < np.uint64(251)
    tag[small] = u[small]
    m[:, 0] = tag
    lengths = np.frombuffer(BVARINT_LENGTHS[U64_TAG], dtype=np.uint8)[tag]
    return m, np.arange(9) < lengths[:, None]


def bvarint_values(w: Any, starts: Any) -> tuple[Any, Any]:
    """The varints starting at ``starts`` in the byte array ``w`` (padded with 8 bytes); (values, first bytes)."""
    import numpy as np

    tag = w[starts]
    body = w[starts[:, None] + np.arange(1, 9)].copy().view("<u8")[:, 0]
    width = np.asarray([0, 0xFFFF, 0xFFFFFFFF, 2**64 - 1], dtype=np.uint64)[np.clip(tag.astype(np.int64) - 250, 0, 3)]
    return np.where(tag < 251, tag.astype(np.uint64), body & width), tag


def read_bvarints(buf: bytes, pos: int, count: int, max_tag: int, fmt: str) -> tuple[Any, int]:
    """``count`` bincode 2 varints from ``pos`` as a uint64 array; (values, new position).

    Where every varint has the width of the first (200..220 zigzagged are all 251 + u16), one
    numpy pass; otherwise a Python walk over the first bytes (~60 ns a varint) finds where each
    starts, and numpy reads them all at once.
    """
    import numpy as np

    if count == 0:
        return np.zeros(0, dtype=np.uint64), pos
    if pos >= len(buf):
        raise corrupt(fmt, f"truncated: {count} varints announced, the message ends at byte {pos}")
    lengths = BVARINT_LENGTHS[max_tag]
    window = np.frombuffer(buf, dtype=np.uint8, count=min(len(buf) - pos, count * 9), offset=pos)
    first = int(window[0])
    step = lengths[first]
    if step == 0:
        raise bad_tag(fmt, first, pos, max_tag)
    span = step * count
    if span <= len(window):
        tags = window[:span:step]
        if step == 1 and bool((tags < 251).all()):
            return tags.astype(np.uint64), pos + count
        if step > 1 and bool((tags == first).all()):
            body = window[:span].reshape(count, step)[:, 1:]
            return body.copy().view(f"<u{step - 1}")[:, 0].astype(np.uint64), pos + span
    table = bytes(buf[pos:pos + count * 9]).translate(lengths)  # each byte -> the length of a varint it starts
    starts = [0] * count
    p = 0
    try:
        for i in range(count):
            starts[i] = p
            n = table[p]
            if n == 0:
                raise bad_tag(fmt, int(window[p]), pos + p, max_tag)
            p += n
    except IndexError:
        raise corrupt(fmt, f"truncated: {count} varints announced at byte {pos}") from None
    if p > len(window):
        raise corrupt(fmt, f"truncated: {count} varints announced at byte {pos}")
    padded = np.concatenate([window[:p], np.zeros(8, dtype=np.uint8)])
    values, _ = bvarint_values(padded, np.asarray(starts, dtype=np.int64))
    return values, pos + p
