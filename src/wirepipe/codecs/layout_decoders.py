"""The fixed layouts' per-record readers (``layout.py`` has the table), built once per schema.

A reader takes the payload and a position and returns the value and the next position; a payload
that ends early, or holds a tag or a value its type does not allow, raises the format's
``StageError`` (the record is dead-lettered with it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..schema import INTS, Kind, Type
from .layout_plan import BINCODE, BINCODE_VARINT, NP, POSTCARD, ST, U64, Dec
from .varints import (
    MAX_TAG,
    U64_TAG,
    VARINT_MAX,
    corrupt,
    read_bvarint,
    read_bvarints,
    read_varint,
    read_varints,
    unzigzag,
    unzigzag_array,
)


def decoder(t: Type, fmt: str) -> Dec:
    dec = _required_decoder(t, fmt)
    if not t.optional:
        return dec

    def optional(buf: bytes, pos: int) -> tuple[Any, int]:
        if pos >= len(buf):
            raise corrupt(fmt, "truncated: the message ends before an option tag")
        tag = buf[pos]
        if tag == 0:
            return None, pos + 1
        if tag != 1:
            raise corrupt(fmt, f"corrupt option tag {tag} at byte {pos} (0 or 1 allowed)")
        return dec(buf, pos + 1)

    return optional


def _read_length(fmt: str) -> Callable[[bytes, int], tuple[int, int]]:
    if fmt == POSTCARD:
        return lambda buf, pos: read_varint(buf, pos, 10, fmt)
    if fmt == BINCODE_VARINT:
        return lambda buf, pos: read_bvarint(buf, pos, U64_TAG, fmt)
    unpack = U64.unpack_from

    def u64(buf: bytes, pos: int) -> tuple[int, int]:
        if pos + 8 > len(buf):
            raise corrupt(fmt, "truncated: the message ends inside a length")
        return unpack(buf, pos)[0], pos + 8

    return u64


def _take(buf: bytes, pos: int, n: int, fmt: str) -> tuple[bytes, int]:
    end = pos + n
    if end > len(buf):
        raise corrupt(fmt, f"truncated: {n} bytes announced at byte {pos}, {len(buf) - pos} left")
    return buf[pos:end], end


def _required_decoder(t: Type, fmt: str) -> Dec:
    kind = t.kind
    read_length = _read_length(fmt)
    if kind in INTS and fmt != BINCODE:
        signed = kind != Kind.UINT32
        maxlen = VARINT_MAX[kind]
        lo, hi = INTS[kind]
        # the layout's varint reader, chosen once (not per value)
        max_tag = MAX_TAG[kind]
        read: Callable[[bytes, int], tuple[int, int]] = (
            (lambda buf, pos: read_varint(buf, pos, maxlen, fmt)) if fmt == POSTCARD
            else (lambda buf, pos: read_bvarint(buf, pos, max_tag, fmt)))

        def int_varint(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read(buf, pos)
            v = unzigzag(n) if signed else n
            if not lo <= v <= hi:
                raise corrupt(fmt, f"varint {v} out of range for {kind}")
            return v, pos

        return int_varint
    if kind in ST:
        st = ST[kind]
        size = st.size
        unpack = st.unpack_from

        def scalar(buf: bytes, pos: int) -> tuple[Any, int]:
            if pos + size > len(buf):
                raise corrupt(fmt, f"truncated: the message ends inside a {kind}")
            return unpack(buf, pos)[0], pos + size

        return scalar
    if kind == Kind.BOOL:
        def boolean(buf: bytes, pos: int) -> tuple[Any, int]:
            if pos >= len(buf):
                raise corrupt(fmt, "truncated: the message ends before a bool")
            b = buf[pos]
            if b > 1:
                raise corrupt(fmt, f"corrupt bool {b} at byte {pos} (0 or 1 allowed)")
            return b == 1, pos + 1

        return boolean
    if kind in (Kind.STRING, Kind.BYTES):
        text = kind == Kind.STRING

        def byte_string(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read_length(buf, pos)
            b, pos = _take(buf, pos, n, fmt)
            if text:
                try:
                    return b.decode("utf-8"), pos
                except UnicodeDecodeError as exc:
                    raise corrupt(fmt, f"string is not UTF-8 ({exc.reason})") from None
            return b, pos

        return byte_string
    if kind == Kind.FIXED:
        size = t.size
        return lambda buf, pos: _take(buf, pos, size, fmt)
    if kind == Kind.LIST:
        return list_decoder(t.item, fmt)  # type: ignore[arg-type]
    fields = [(f.name, decoder(f.type, fmt)) for f in t.record.fields]  # type: ignore[union-attr]

    def record(buf: bytes, pos: int) -> tuple[Any, int]:
        out = {}
        for name, dec in fields:
            out[name], pos = dec(buf, pos)
        return out, pos

    return record


def list_decoder(item: Type, fmt: str) -> Dec:
    import numpy as np

    read_length = _read_length(fmt)
    if not item.optional and item.kind in NP:
        kind = item.kind
        if kind in INTS and fmt != BINCODE:
            signed = kind != Kind.UINT32
            lo, hi = INTS[kind]
            maxlen, max_tag = VARINT_MAX[kind], MAX_TAG[kind]
            read_all: Callable[[bytes, int, int], tuple[Any, int]] = (
                (lambda buf, pos, n: read_varints(buf, pos, n, maxlen, fmt)) if fmt == POSTCARD
                else (lambda buf, pos, n: read_bvarints(buf, pos, n, max_tag, fmt)))

            def int_list_varint(buf: bytes, pos: int) -> tuple[Any, int]:
                n, pos = read_length(buf, pos)
                u, pos = read_all(buf, pos, n)
                a = unzigzag_array(u) if signed else u
                if n and (int(a.min()) < lo or int(a.max()) > hi):
                    raise corrupt(fmt, f"a varint is out of range for {kind}")
                return a.tolist(), pos

            return int_list_varint
        dtype = np.dtype(NP[kind])

        def numeric_list(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read_length(buf, pos)
            end = pos + n * dtype.itemsize
            if end > len(buf):
                raise corrupt(fmt, f"truncated: {n} {kind} announced at byte {pos}, {len(buf) - pos} bytes left")
            return np.frombuffer(buf, dtype, n, pos).tolist(), end

        return numeric_list
    dec = decoder(item, fmt)

    def items(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_length(buf, pos)
        if n > len(buf) - pos:  # every item takes at least one byte: refuse absurd counts early
            raise corrupt(fmt, f"truncated: {n} items announced at byte {pos}, {len(buf) - pos} bytes left")
        out = []
        for _ in range(n):
            v, pos = dec(buf, pos)
            out.append(v)
        return out, pos

    return items
