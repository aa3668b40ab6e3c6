"""Fixed binary layouts from a typed schema: ``bincode`` (fixint), ``postcard`` (LEB128 varints)
and ``bincode-varint`` (bincode 2's default ``config::standard()`` varints).

These are the Python counterparts of the FlatMessage tables' bincode and postcard rows, and their
bytes are the bytes Rust writes for the same struct, so a Rust peer reads them with
``bincode::deserialize`` (bincode 1.x, or bincode 2 with ``config::legacy()``),
``postcard::from_bytes``, or bincode 2's ``decode_from_slice(.., config::standard())`` (the
tables' "bincode (schema)" row, 2 bytes for their Point). The layout, field by field in schema
order, nothing between fields:

=================  ==========================  ===========================  ============================
type               bincode (fixint, LE)        postcard                     bincode-varint (LE)
=================  ==========================  ===========================  ============================
int32 / uint32     4 bytes (two's complement)  zigzag / plain LEB128 (<=5)  zigzag / plain bvarint (<=5)
int64              8 bytes                     zigzag LEB128 (<= 10 B)      zigzag bvarint (<= 9 B)
float32 / float64  4 / 8 bytes IEEE 754        4 / 8 bytes IEEE 754         4 / 8 bytes IEEE 754
bool               1 byte, 0 or 1              1 byte, 0 or 1               1 byte, 0 or 1
string, bytes      u64 length, then the bytes  LEB128 length, the bytes     bvarint length, the bytes
bytes[N]           the N bytes ([u8; N])       the N bytes                  the N bytes
list<T>            u64 count, then each item   LEB128 count, each item      bvarint count, each item
record             its fields in order         its fields in order          its fields in order
T? (optional)      1 byte 0 (None) or 1, value same                         same
=================  ==========================  ===========================  ============================

zigzag(n) = (n << 1) ^ (n >> 63): 0, -1, 1, -2 ... become 0, 1, 2, 3 ... A LEB128 varint writes
7 bits per byte, least significant group first, the high bit set on every byte but the last. A
bvarint (bincode 2) of u is the byte u when u < 251, else 251 then u as u16 LE (u < 2**16), 252
then u32 LE (u < 2**32), 253 then u64 LE: 250 -> ``fa``, 251 -> ``fb fb 00``, 65536 -> ``fc 00
00 01 00``. The decoder takes the longer forms (bincode's does), and refuses 254, 255 and a tag
wider than the field (253 in a 32-bit field), as bincode's ``InvalidIntegerType``.
A record with a field the schema does not declare is refused, not written without it (one
``len`` per record: every field was read, so more keys than fields is one too many).
A message framed with several records (``pack`` before ``serialize``) is ``Vec<Record>``: the
count (u64 LE / varint) then the records. A message is one record or one Vec, never both: the
decoder is told which (``framed: true``), as a Rust peer would be by its type.

Speed: records whose fields all have a fixed width (``point``) are packed and unpacked a batch
at a time with numpy (one structured array, one varint matrix, or for bincode-varint one numpy
step per field across the batch), not record by record; numeric lists (``large_vectors``) are
one numpy call per list (bincode-varint decodes a list of mixed widths with a Python walk over
the first bytes, ~60 ns a value, then one numpy gather).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

from ..core.errors import StageError
from ..schema import INTS, RecordSchema, Type

Enc = Callable[[Any, list[bytes]], None]
Dec = Callable[[bytes, int], tuple[Any, int]]

_NP = {"int32": "<i4", "int64": "<i8", "uint32": "<u4", "float32": "<f4", "float64": "<f8"}
_ST = {"int32": struct.Struct("<i"), "int64": struct.Struct("<q"), "uint32": struct.Struct("<I"),
       "float32": struct.Struct("<f"), "float64": struct.Struct("<d")}
_U64 = struct.Struct("<Q")
_VARINT_MAX = {"int32": 5, "uint32": 5, "int64": 10}
_BYTES_LIKE = (bytes, bytearray, memoryview)
BINCODE, POSTCARD, BINCODE_VARINT = "bincode", "postcard", "bincode-varint"  # the layouts, by format name


def _corrupt(fmt: str, reason: str) -> StageError:
    return StageError("deserialize", fmt, reason)


# --- varints -------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint(i) for i in range(1 << 14)]  # one lookup instead of a loop for values < 16384


def varint(n: int) -> bytes:
    return _SMALL[n] if n < 16384 else _varint(n)


def _read_varint(buf: bytes, pos: int, maxlen: int, fmt: str) -> tuple[int, int]:
    result = shift = 0
    for i in range(maxlen):
        try:
            b = buf[pos + i]
        except IndexError:
            raise _corrupt(fmt, "truncated: the message ends inside a varint") from None
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    raise _corrupt(fmt, f"corrupt varint at byte {pos}: longer than {maxlen} bytes")


def _zigzag(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _varint_matrix(v: Any, maxlen: int) -> tuple[Any, Any]:
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


def _zigzag_array(a: Any, bits: int) -> Any:
    import numpy as np

    a = a.astype(np.int64)
    return ((a << 1) ^ (a >> 63)).astype(np.uint64) & np.uint64((1 << bits) - 1 if bits < 64 else 2**64 - 1)


def _read_varints(buf: bytes, pos: int, count: int, maxlen: int, fmt: str) -> tuple[Any, int]:
    """``count`` varints from ``pos`` as a uint64 array, vectorized; (values, new position)."""
    import numpy as np

    if count == 0:
        return np.zeros(0, dtype=np.uint64), pos
    window = np.frombuffer(buf, dtype=np.uint8, count=min(len(buf) - pos, count * maxlen), offset=pos) \
        if pos <= len(buf) else np.zeros(0, dtype=np.uint8)
    ends = np.flatnonzero(window < 0x80)[:count]
    if len(ends) < count:
        raise _corrupt(fmt, f"truncated: {count} varints announced, {len(ends)} present")
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > maxlen:
        raise _corrupt(fmt, f"corrupt varint: longer than {maxlen} bytes")
    used = window[: int(ends[-1]) + 1]
    offsets = np.arange(len(used)) - np.repeat(starts, lengths)
    contrib = (used & 0x7F).astype(np.uint64) << (offsets.astype(np.uint64) * np.uint64(7))
    return np.add.reduceat(contrib, starts), pos + int(ends[-1]) + 1


def _unzigzag_array(v: Any) -> Any:
    import numpy as np

    return (v >> np.uint64(1)).astype(np.int64) ^ -(v & np.uint64(1)).astype(np.int64)


# --- bincode 2's varints (config::standard()) ------------------------------------------------------
#
# u < 251 is the byte u; else a tag byte then the value little-endian: 251 + u16, 252 + u32,
# 253 + u64 (254 + u128 never occurs here: the widest type is 64-bit). Signed values are zigzagged
# first. The decoder takes the longer forms for small values as bincode's does (251 00 05 reads
# 5), and refuses a tag wider than the field (253 in an i32/u32: bincode's InvalidIntegerType),
# 254 and 255.

_U16_TAG, _U32_TAG, _U64_TAG = 251, 252, 253
_MAX_TAG = {"int32": _U32_TAG, "uint32": _U32_TAG, "int64": _U64_TAG}
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


_BLEN = {tag: _bvarint_lengths(tag) for tag in (_U32_TAG, _U64_TAG)}


def _bad_tag(fmt: str, tag: int, pos: int, max_tag: int) -> StageError:
    wide = "a 64-bit" if max_tag == _U64_TAG else "a 32-bit"
    return _corrupt(fmt, f"corrupt varint tag {tag} at byte {pos} (0..250 or 251..{max_tag} in {wide} field)")


def _read_bvarint(buf: bytes, pos: int, max_tag: int, fmt: str) -> tuple[int, int]:
    try:
        tag = buf[pos]
    except IndexError:
        raise _corrupt(fmt, "truncated: the message ends before a varint") from None
    if tag < 251:
        return tag, pos + 1
    size = _BLEN[max_tag][tag] - 1
    if size < 0:
        raise _bad_tag(fmt, tag, pos, max_tag)
    end = pos + 1 + size
    if end > len(buf):
        raise _corrupt(fmt, "truncated: the message ends inside a varint")
    return int.from_bytes(buf[pos + 1:end], "little"), end


def _bvarint_matrix(u: Any) -> tuple[Any, Any]:
    """bincode 2 varints of a uint64 array as an (n x 9) byte matrix and the mask of the bytes used."""
    import numpy as np

    n = len(u)
    m = np.empty((n, 9), dtype=np.uint8)
    m[:, 1:] = u.astype("<u8").view(np.uint8).reshape(n, 8)
    tag = np.full(n, _U64_TAG, dtype=np.uint8)
    tag[u < np.uint64(0x100000000)] = _U32_TAG
    tag[u < np.uint64(0x10000)] = _U16_TAG
    small = u < np.uint64(251)
    tag[small] = u[small]
    m[:, 0] = tag
    lengths = np.frombuffer(_BLEN[_U64_TAG], dtype=np.uint8)[tag]
    return m, np.arange(9) < lengths[:, None]


def _bvarint_values(w: Any, starts: Any) -> tuple[Any, Any]:
    """The varints starting at ``starts`` in the byte array ``w`` (padded with 8 bytes); (values, first bytes)."""
    import numpy as np

    tag = w[starts]
    body = w[starts[:, None] + np.arange(1, 9)].copy().view("<u8")[:, 0]
    width = np.asarray([0, 0xFFFF, 0xFFFFFFFF, 2**64 - 1], dtype=np.uint64)[np.clip(tag.astype(np.int64) - 250, 0, 3)]
    return np.where(tag < 251, tag.astype(np.uint64), body & width), tag


def _read_bvarints(buf: bytes, pos: int, count: int, max_tag: int, fmt: str) -> tuple[Any, int]:
    """``count`` bincode 2 varints from ``pos`` as a uint64 array; (values, new position).

    Where every varint has the width of the first (200..220 zigzagged are all 251 + u16), one
    numpy pass; otherwise a Python walk over the first bytes (~60 ns a varint) finds where each
    starts, and numpy reads them all at once.
    """
    import numpy as np

    if count == 0:
        return np.zeros(0, dtype=np.uint64), pos
    if pos >= len(buf):
        raise _corrupt(fmt, f"truncated: {count} varints announced, the message ends at byte {pos}")
    lengths = _BLEN[max_tag]
    window = np.frombuffer(buf, dtype=np.uint8, count=min(len(buf) - pos, count * 9), offset=pos)
    first = int(window[0])
    step = lengths[first]
    if step == 0:
        raise _bad_tag(fmt, first, pos, max_tag)
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
                raise _bad_tag(fmt, int(window[p]), pos + p, max_tag)
            p += n
    except IndexError:
        raise _corrupt(fmt, f"truncated: {count} varints announced at byte {pos}") from None
    if p > len(window):
        raise _corrupt(fmt, f"truncated: {count} varints announced at byte {pos}")
    padded = np.concatenate([window[:p], np.zeros(8, dtype=np.uint8)])
    values, _ = _bvarint_values(padded, np.asarray(starts, dtype=np.int64))
    return values, pos + p


# --- per-record encoders and decoders, built once per schema -----------------------------------------


def _as_bytes(v: Any) -> bytes:
    if type(v) is bytes:
        return v
    if isinstance(v, _BYTES_LIKE):
        return bytes(v)
    raise TypeError(f"expected bytes, got {type(v).__name__}")


def _int_array(v: Any, kind: str) -> Any:
    """A list of integers as a numpy array of ``kind``, refusing floats, text and out-of-range values."""
    import numpy as np

    a = np.asarray(v)
    if a.ndim != 1 or (a.dtype.kind not in "iu" and len(a)):
        raise TypeError(f"expected a list of {kind}, got {a.dtype} items")
    lo, hi = INTS[kind]
    if len(a) and (int(a.min()) < lo or int(a.max()) > hi):
        raise OverflowError(f"a value is out of range for {kind} ({lo}..{hi})")
    return a.astype(_NP[kind])


def _float_array(v: Any, kind: str) -> Any:
    import numpy as np

    a = np.asarray(v)
    if a.ndim != 1 or (a.dtype.kind not in "iuf" and len(a)):
        raise TypeError(f"expected a list of {kind}, got {a.dtype} items")
    return a.astype(_NP[kind])


def _encoder(t: Type, fmt: str) -> Enc:
    enc = _required_encoder(t, fmt)
    if not t.optional:
        return enc

    def optional(v: Any, out: list[bytes]) -> None:
        if v is None:
            out.append(b"\x00")
        else:
            out.append(b"\x01")
            enc(v, out)

    return optional


def _length(fmt: str) -> Callable[[int], bytes]:
    return {POSTCARD: varint, BINCODE_VARINT: bvarint}.get(fmt, _U64.pack)


def _required_encoder(t: Type, fmt: str) -> Enc:
    kind = t.kind
    length = _length(fmt)
    if kind in INTS and fmt != BINCODE:
        signed = kind != "uint32"
        bits = 64 if kind == "int64" else 32
        pack = _ST[kind].pack  # range and type check, as Rust's would fail to compile
        write = varint if fmt == POSTCARD else bvarint

        def int_varint(v: Any, out: list[bytes]) -> None:
            if type(v) is bool:
                raise TypeError("expected an integer, got bool")
            pack(v)
            out.append(write(_zigzag(v, bits) if signed else v))

        return int_varint
    if kind in _ST:
        pack = _ST[kind].pack
        if kind in INTS:
            def fixed_int(v: Any, out: list[bytes]) -> None:
                if type(v) is bool:
                    raise TypeError("expected an integer, got bool")
                out.append(pack(v))

            return fixed_int
        return lambda v, out: out.append(pack(v))
    if kind == "bool":
        def boolean(v: Any, out: list[bytes]) -> None:
            if v is True:
                out.append(b"\x01")
            elif v is False:
                out.append(b"\x00")
            else:
                raise TypeError(f"expected bool, got {type(v).__name__}")

        return boolean
    if kind == "string":
        def string(v: Any, out: list[bytes]) -> None:
            b = v.encode("utf-8")
            out.append(length(len(b)))
            out.append(b)

        return string
    if kind == "bytes":
        def byte_string(v: Any, out: list[bytes]) -> None:
            b = _as_bytes(v)
            out.append(length(len(b)))
            out.append(b)

        return byte_string
    if kind == "fixed":
        size = t.size

        def fixed(v: Any, out: list[bytes]) -> None:
            b = _as_bytes(v)
            if len(b) != size:
                raise ValueError(f"expected exactly {size} bytes, got {len(b)}")
            out.append(b)

        return fixed
    if kind == "list":
        return _list_encoder(t.item, fmt)  # type: ignore[arg-type]
    fields = [(f.name, _encoder(f.type, fmt), f.type.optional)
              for f in t.record.fields]  # type: ignore[union-attr]
    n = len(fields)
    declared = frozenset(t.record.names).issuperset  # type: ignore[union-attr]
    any_optional = any(optional for _, _, optional in fields)

    def record(v: Any, out: list[bytes]) -> None:
        for name, enc, optional in fields:
            enc(v.get(name) if optional else v[name], out)
        # Every field was read, so with no optional field a record of n keys declares no other one; else
        # (or with more keys) the keys are compared. A field the schema does not declare is refused: the
        # layout would leave it out (``explain`` names it).
        if (any_optional or len(v) != n) and not declared(v):
            raise ValueError("a field the schema does not declare")

    return record


def _list_encoder(item: Type, fmt: str) -> Enc:
    length = _length(fmt)
    if not item.optional and item.kind in _NP:
        kind = item.kind
        if kind in INTS and fmt != BINCODE:
            bits = 64 if kind == "int64" else 32
            maxlen = _VARINT_MAX[kind]
            signed = kind != "uint32"
            matrix = functools.partial(_varint_matrix, maxlen=maxlen) if fmt == POSTCARD else _bvarint_matrix

            def int_list_varint(v: Any, out: list[bytes]) -> None:
                a = _int_array(v, kind)
                u = _zigzag_array(a, bits) if signed else a.astype("uint64")
                m, mask = matrix(u)
                out.append(length(len(a)))
                out.append(m[mask].tobytes())

            return int_list_varint
        to_array = _int_array if kind in INTS else _float_array

        def numeric_list(v: Any, out: list[bytes]) -> None:
            a = to_array(v, kind)
            out.append(length(len(a)))
            out.append(a.tobytes())

        return numeric_list
    enc = _encoder(item, fmt)

    def items(v: Any, out: list[bytes]) -> None:
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"expected a list, got {type(v).__name__}")
        out.append(length(len(v)))
        for x in v:
            enc(x, out)

    return items


def _decoder(t: Type, fmt: str) -> Dec:
    dec = _required_decoder(t, fmt)
    if not t.optional:
        return dec

    def optional(buf: bytes, pos: int) -> tuple[Any, int]:
        if pos >= len(buf):
            raise _corrupt(fmt, "truncated: the message ends before an option tag")
        tag = buf[pos]
        if tag == 0:
            return None, pos + 1
        if tag != 1:
            raise _corrupt(fmt, f"corrupt option tag {tag} at byte {pos} (0 or 1 allowed)")
        return dec(buf, pos + 1)

    return optional


def _read_length(fmt: str) -> Callable[[bytes, int], tuple[int, int]]:
    if fmt == POSTCARD:
        return lambda buf, pos: _read_varint(buf, pos, 10, fmt)
    if fmt == BINCODE_VARINT:
        return lambda buf, pos: _read_bvarint(buf, pos, _U64_TAG, fmt)
    unpack = _U64.unpack_from

    def u64(buf: bytes, pos: int) -> tuple[int, int]:
        if pos + 8 > len(buf):
            raise _corrupt(fmt, "truncated: the message ends inside a length")
        return unpack(buf, pos)[0], pos + 8

    return u64


def _take(buf: bytes, pos: int, n: int, fmt: str) -> tuple[bytes, int]:
    end = pos + n
    if end > len(buf):
        raise _corrupt(fmt, f"truncated: {n} bytes announced at byte {pos}, {len(buf) - pos} left")
    return buf[pos:end], end


def _required_decoder(t: Type, fmt: str) -> Dec:
    kind = t.kind
    read_length = _read_length(fmt)
    if kind in INTS and fmt != BINCODE:
        signed = kind != "uint32"
        maxlen = _VARINT_MAX[kind]
        lo, hi = INTS[kind]
        # the layout's varint reader, chosen once (not per value)
        max_tag = _MAX_TAG[kind]
        read: Callable[[bytes, int], tuple[int, int]] = (
            (lambda buf, pos: _read_varint(buf, pos, maxlen, fmt)) if fmt == POSTCARD
            else (lambda buf, pos: _read_bvarint(buf, pos, max_tag, fmt)))

        def int_varint(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read(buf, pos)
            v = _unzigzag(n) if signed else n
            if not lo <= v <= hi:
                raise _corrupt(fmt, f"varint {v} out of range for {kind}")
            return v, pos

        return int_varint
    if kind in _ST:
        st = _ST[kind]
        size = st.size
        unpack = st.unpack_from

        def scalar(buf: bytes, pos: int) -> tuple[Any, int]:
            if pos + size > len(buf):
                raise _corrupt(fmt, f"truncated: the message ends inside a {kind}")
            return unpack(buf, pos)[0], pos + size

        return scalar
    if kind == "bool":
        def boolean(buf: bytes, pos: int) -> tuple[Any, int]:
            if pos >= len(buf):
                raise _corrupt(fmt, "truncated: the message ends before a bool")
            b = buf[pos]
            if b > 1:
                raise _corrupt(fmt, f"corrupt bool {b} at byte {pos} (0 or 1 allowed)")
            return b == 1, pos + 1

        return boolean
    if kind in ("string", "bytes"):
        text = kind == "string"

        def byte_string(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read_length(buf, pos)
            b, pos = _take(buf, pos, n, fmt)
            if text:
                try:
                    return b.decode("utf-8"), pos
                except UnicodeDecodeError as exc:
                    raise _corrupt(fmt, f"string is not UTF-8 ({exc.reason})") from None
            return b, pos

        return byte_string
    if kind == "fixed":
        size = t.size
        return lambda buf, pos: _take(buf, pos, size, fmt)
    if kind == "list":
        return _list_decoder(t.item, fmt)  # type: ignore[arg-type]
    fields = [(f.name, _decoder(f.type, fmt)) for f in t.record.fields]  # type: ignore[union-attr]

    def record(buf: bytes, pos: int) -> tuple[Any, int]:
        out = {}
        for name, dec in fields:
            out[name], pos = dec(buf, pos)
        return out, pos

    return record


def _list_decoder(item: Type, fmt: str) -> Dec:
    import numpy as np

    read_length = _read_length(fmt)
    if not item.optional and item.kind in _NP:
        kind = item.kind
        if kind in INTS and fmt != BINCODE:
            signed = kind != "uint32"
            lo, hi = INTS[kind]
            maxlen, max_tag = _VARINT_MAX[kind], _MAX_TAG[kind]
            read_all: Callable[[bytes, int, int], tuple[Any, int]] = (
                (lambda buf, pos, n: _read_varints(buf, pos, n, maxlen, fmt)) if fmt == POSTCARD
                else (lambda buf, pos, n: _read_bvarints(buf, pos, n, max_tag, fmt)))

            def int_list_varint(buf: bytes, pos: int) -> tuple[Any, int]:
                n, pos = read_length(buf, pos)
                u, pos = read_all(buf, pos, n)
                a = _unzigzag_array(u) if signed else u
                if n and (int(a.min()) < lo or int(a.max()) > hi):
                    raise _corrupt(fmt, f"a varint is out of range for {kind}")
                return a.tolist(), pos

            return int_list_varint
        dtype = np.dtype(_NP[kind])

        def numeric_list(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read_length(buf, pos)
            end = pos + n * dtype.itemsize
            if end > len(buf):
                raise _corrupt(fmt, f"truncated: {n} {kind} announced at byte {pos}, {len(buf) - pos} bytes left")
            return np.frombuffer(buf, dtype, n, pos).tolist(), end

        return numeric_list
    dec = _decoder(item, fmt)

    def items(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_length(buf, pos)
        if n > len(buf) - pos:  # every item takes at least one byte: refuse absurd counts early
            raise _corrupt(fmt, f"truncated: {n} items announced at byte {pos}, {len(buf) - pos} bytes left")
        out = []
        for _ in range(n):
            v, pos = dec(buf, pos)
            out.append(v)
        return out, pos

    return items


# --- the format: one record or a Vec of records per message ------------------------------------------


class Layout:
    """One of the three layouts for one record schema: ``bincode`` (fixint), ``postcard``
    (LEB128 varints) or ``bincode-varint`` (bincode 2's ``standard()`` varints).

    ``layout`` is the format name.
    """

    def __init__(self, schema: RecordSchema, layout: str) -> None:
        fmt = layout
        if fmt not in (BINCODE, POSTCARD, BINCODE_VARINT):
            raise ValueError(f"unknown layout {fmt!r}: allowed {BINCODE}, {POSTCARD}, {BINCODE_VARINT}")
        self.schema = schema
        self.fmt = fmt
        self.varints = fmt != BINCODE
        rec = Type("record", record=schema)
        self._enc = _encoder(rec, fmt)
        self._dec = _decoder(rec, fmt)
        self._vec_enc = _list_encoder(rec, fmt)
        self._vec_dec = _list_decoder(rec, fmt)
        self._flat = all(f.type.kind in _NP or f.type.kind == "bool" for f in schema.fields) and \
            not any(f.type.optional for f in schema.fields)
        self._dtype = self._struct_dtype() if self._flat else None

    def _struct_dtype(self) -> Any:
        import numpy as np

        return np.dtype([(f.name, _NP.get(f.type.kind, "u1")) for f in self.schema.fields])

    # per record -----------------------------------------------------------------------------
    def encode(self, value: Any) -> bytes:
        out: list[bytes] = []
        if type(value) is list:
            if self._flat and value and type(value[0]) is dict:
                # a framed message of fixed-size records: the whole Vec in one numpy pass
                if self.varints:
                    return _length(self.fmt)(len(value)) + b"".join(self._encode_varint_rows(value))
                return _U64.pack(len(value)) + self._bincode_array(value).tobytes()
            self._vec_enc(value, out)
        else:
            self._enc(value, out)
        return b"".join(out)

    def _whole(self, dec: Dec, data: bytes) -> Any:
        if not isinstance(data, bytes):
            data = bytes(data)
        value, end = dec(data, 0)
        if end != len(data):
            raise _corrupt(self.fmt, f"{len(data) - end} trailing bytes after the {self.schema.name}")
        return value

    def decode(self, data: bytes) -> Any:
        return self._whole(self._dec, data)

    def decode_framed(self, data: bytes) -> Any:
        if self._flat and not self.varints and len(data) >= 8:
            # Vec of fixed-size records: the count, then n records of one numpy dtype
            n = _U64.unpack_from(data)[0]
            size = self._dtype.itemsize  # type: ignore[union-attr]
            if len(data) != 8 + n * size:
                raise _corrupt(self.fmt, f"{n} records announced: expected {8 + n * size} bytes, got {len(data)}")
            return self._records(self._bincode_columns(data[8:], n))
        return self._whole(self._vec_dec, data)

    def _records(self, cols: list[list[Any]]) -> list[dict[str, Any]]:
        names = self.schema.names
        if len(names) == 2:
            a, b = names
            return [{a: x, b: y} for x, y in zip(*cols, strict=True)]
        return [dict(zip(names, row, strict=True)) for row in zip(*cols, strict=True)]

    # a batch at a time, for records whose fields all have a fixed width --------------------------
    def encode_column(self, values: list[Any]) -> list[bytes]:
        """Every record of the batch (dicts, not lists) at once; raises on anything else."""
        if not self._flat or not values or type(values[0]) is not dict:
            return [self.encode(v) for v in values]
        return self._encode_varint_rows(values) if self.varints else self._encode_bincode(values)

    def _bincode_array(self, values: list[Any]) -> Any:
        import numpy as np

        arr = np.empty(len(values), dtype=self._dtype)
        for f, col in zip(self.schema.fields, self._columns(values), strict=True):
            arr[f.name] = col
        return arr

    def _columns(self, values: list[Any]) -> list[Any]:
        import numpy as np

        cols = []
        for f in self.schema.fields:
            col = np.asarray([r[f.name] for r in values])
            kind = f.type.kind
            if kind == "bool":
                if col.dtype.kind != "b":
                    raise TypeError(f"{f.name}: expected bool")
            elif kind in INTS:
                if col.dtype.kind not in "iu":
                    raise TypeError(f"{f.name}: expected {kind}")
                lo, hi = INTS[kind]
                if int(col.min()) < lo or int(col.max()) > hi:
                    raise OverflowError(f"{f.name}: out of range for {kind}")
            elif col.dtype.kind not in "iuf":
                raise TypeError(f"{f.name}: expected {kind}")
            cols.append(col)
        # every field was read from every record, so a record with more keys has one the schema does not declare
        if values and max(map(len, values)) != len(cols):
            raise ValueError("a field the schema does not declare")
        return cols

    def _encode_bincode(self, values: list[Any]) -> list[bytes]:
        n = len(values)
        buf = self._bincode_array(values).tobytes()
        size = self._dtype.itemsize  # type: ignore[union-attr]
        return [buf[i:i + size] for i in range(0, n * size, size)]

    def _field_matrix(self, f: Any, col: Any) -> tuple[Any, Any]:
        import numpy as np

        kind = f.type.kind
        if kind in INTS:
            u = _zigzag_array(col, 64 if kind == "int64" else 32) if kind != "uint32" else col.astype(np.uint64)
            return _varint_matrix(u, _VARINT_MAX[kind]) if self.fmt == POSTCARD else _bvarint_matrix(u)
        m = col.astype(_NP.get(kind, "u1")).view(np.uint8).reshape(len(col), -1)
        return m, np.ones(m.shape, dtype=bool)

    def _encode_varint_rows(self, values: list[Any]) -> list[bytes]:
        """postcard or bincode-varint: each field's bytes as a matrix with a mask, all fields side by side."""
        import numpy as np

        parts = [self._field_matrix(f, c) for f, c in zip(self.schema.fields, self._columns(values), strict=True)]
        m = np.hstack([p[0] for p in parts])
        mask = np.hstack([p[1] for p in parts])
        flat = m[mask].tobytes()
        ends = np.cumsum(mask.sum(axis=1)).tolist()
        starts = [0, *ends[:-1]]
        return [flat[a:b] for a, b in zip(starts, ends, strict=True)]

    def decode_column(self, payloads: list[bytes]) -> list[Any]:
        """Every payload of the batch at once (one record each); raises if any does not fit."""
        if not self._flat or not payloads:
            return [self.decode(p) for p in payloads]
        if self.fmt == BINCODE_VARINT:
            return self._records(self._decode_bincode_varint(payloads))
        return self._records(self._decode_postcard(payloads) if self.varints else self._decode_bincode(payloads))

    def _decode_bincode(self, payloads: list[bytes]) -> list[list[Any]]:
        size = self._dtype.itemsize  # type: ignore[union-attr]
        buf = b"".join(payloads)
        if len(buf) != size * len(payloads) or any(len(p) != size for p in payloads):
            raise _corrupt(self.fmt, "a message is not one record long")
        return self._bincode_columns(buf, len(payloads))

    def _bincode_columns(self, buf: bytes, n: int) -> list[list[Any]]:
        import numpy as np

        arr = np.frombuffer(buf, dtype=self._dtype, count=n)
        cols = []
        for f in self.schema.fields:
            col = arr[f.name]
            if f.type.kind == "bool":
                if (col.view(np.uint8) > 1).any():
                    raise _corrupt(self.fmt, "corrupt bool")
                col = col.astype(bool)
            cols.append(col.tolist())
        return cols

    def _decode_postcard(self, payloads: list[bytes]) -> list[list[Any]]:
        import numpy as np

        if any(f.type.kind not in INTS for f in self.schema.fields):
            return [list(col) for col in zip(*(self.decode(p).values() for p in payloads), strict=True)]
        nf = len(self.schema.fields)
        buf = b"".join(payloads)
        n = len(payloads)
        maxlen = max(_VARINT_MAX[f.type.kind] for f in self.schema.fields)
        u, end = _read_varints(buf, 0, n * nf, maxlen, self.fmt)
        if end != len(buf):
            raise _corrupt(self.fmt, "trailing bytes after a record")
        # every message must end exactly where its record's last varint ends
        window = np.frombuffer(buf, dtype=np.uint8)
        last = np.flatnonzero(window < 0x80)[nf - 1::nf] + 1
        if not np.array_equal(last, np.cumsum([len(p) for p in payloads])):
            raise _corrupt(self.fmt, "a message is not one record long")
        cols = []
        for j, f in enumerate(self.schema.fields):
            c = u[j::nf]
            v = _unzigzag_array(c) if f.type.kind != "uint32" else c
            lo, hi = INTS[f.type.kind]
            if int(v.min()) < lo or int(v.max()) > hi:
                raise _corrupt(self.fmt, f"{f.name}: a varint is out of range for {f.type.kind}")
            cols.append(v.tolist())
        return cols

    def _decode_bincode_varint(self, payloads: list[bytes]) -> list[list[Any]]:
        """Field by field across the batch: every message's next field read at once (a varint's width
        is in its first byte), so a record of k fields is k numpy steps whatever the batch size."""
        import numpy as np

        sizes = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
        ends = np.cumsum(sizes)
        pos = ends - sizes
        w = np.frombuffer(b"".join(payloads) + bytes(9), dtype=np.uint8)
        cols = []
        for f in self.schema.fields:
            kind = f.type.kind
            if (pos >= ends).any():
                raise _corrupt(self.fmt, f"truncated: a message ends before {f.name}")
            if kind in INTS:
                u, tag = _bvarint_values(w, pos)
                width = np.frombuffer(_BLEN[_MAX_TAG[kind]], dtype=np.uint8)[tag]
                if not width.all():
                    bad = int(np.flatnonzero(width == 0)[0])
                    raise _bad_tag(self.fmt, int(tag[bad]), int(pos[bad]), _MAX_TAG[kind])
                pos = pos + width
                cols.append((_unzigzag_array(u) if kind != "uint32" else u).tolist())
                continue
            size = np.dtype(_NP.get(kind, "u1")).itemsize
            raw = w[pos[:, None] + np.arange(size)].copy()
            if kind == "bool":
                if (raw > 1).any():
                    raise _corrupt(self.fmt, f"corrupt bool in {f.name} (0 or 1 allowed)")
                cols.append((raw[:, 0] == 1).tolist())
            else:
                cols.append(raw.view(_NP[kind])[:, 0].tolist())
            pos = pos + size
        if not np.array_equal(pos, ends):
            raise _corrupt(self.fmt, "a message is not one record long")
        return cols
