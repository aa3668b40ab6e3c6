"""The fixed layouts' per-record writers (``layout.py`` has the table), built once per schema.

A writer appends one value's bytes to a list; a record's writer calls its fields' in schema order.
Numeric lists are one numpy call per list. A writer checks the value as it writes it, by the
schema's rules (``schema.check_value``): ``struct`` refuses a number out of its kind's range (the
ranges of ``schema.INTS``) or of another type, and what it would take (a bool for a number) is
refused here. A separate check first (``checks.validator``, what the formats whose library writes
anything use) would cost a third of a ``transaction`` record's write again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..schema import INTS, Kind, Type
from .layout_plan import BINCODE, BINCODE_VARINT, BYTES_LIKE, NP, POSTCARD, ST, U64, Enc
from .varints import VARINT_MAX, bvarint, bvarint_matrix, varint, varint_matrix, zigzag, zigzag_array


def _as_bytes(v: Any) -> bytes:
    if type(v) is bytes:
        return v
    if isinstance(v, BYTES_LIKE):
        return bytes(v)
    raise TypeError(f"expected bytes, got {type(v).__name__}")


def _int_array(v: Any, kind: Kind) -> Any:
    """A list of integers as a numpy array of ``kind``, refusing floats, text and out-of-range values."""
    import numpy as np

    a = np.asarray(v)
    if a.ndim != 1 or (a.dtype.kind not in "iu" and len(a)):
        raise TypeError(f"expected a list of {kind}, got {a.dtype} items")
    lo, hi = INTS[kind]
    if len(a) and (int(a.min()) < lo or int(a.max()) > hi):
        raise OverflowError(f"a value is out of range for {kind} ({lo}..{hi})")
    return a.astype(NP[kind])


def _float_array(v: Any, kind: Kind) -> Any:
    import numpy as np

    a = np.asarray(v)
    if a.ndim != 1 or (a.dtype.kind not in "iuf" and len(a)):
        raise TypeError(f"expected a list of {kind}, got {a.dtype} items")
    return a.astype(NP[kind])


def encoder(t: Type, fmt: str) -> Enc:
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


def length_writer(fmt: str) -> Callable[[int], bytes]:
    return {POSTCARD: varint, BINCODE_VARINT: bvarint}.get(fmt, U64.pack)


def _number_encoder(kind: Kind, fmt: str) -> Enc:
    """An integer (fixint, or a varint in postcard and bincode-varint) or a float, packed by ``struct``, which
    refuses a value out of the kind's range or of another type."""
    pack = ST[kind].pack
    if kind in INTS and fmt != BINCODE:
        signed = kind != Kind.UINT32
        bits = 64 if kind == Kind.INT64 else 32
        write = varint if fmt == POSTCARD else bvarint

        def int_varint(v: Any, out: list[bytes]) -> None:
            if type(v) is bool:
                raise TypeError("expected an integer, got bool")
            pack(v)  # the range and type check only
            out.append(write(zigzag(v, bits) if signed else v))

        return int_varint
    if kind in INTS:
        def fixed_int(v: Any, out: list[bytes]) -> None:
            if type(v) is bool:
                raise TypeError("expected an integer, got bool")
            out.append(pack(v))

        return fixed_int
    return lambda v, out: out.append(pack(v))


def _required_encoder(t: Type, fmt: str) -> Enc:
    kind = t.kind
    length = length_writer(fmt)
    if kind in ST:
        return _number_encoder(kind, fmt)
    if kind == Kind.BOOL:
        def boolean(v: Any, out: list[bytes]) -> None:
            if v is True:
                out.append(b"\x01")
            elif v is False:
                out.append(b"\x00")
            else:
                raise TypeError(f"expected bool, got {type(v).__name__}")

        return boolean
    if kind == Kind.STRING:
        def string(v: Any, out: list[bytes]) -> None:
            b = v.encode("utf-8")
            out.append(length(len(b)))
            out.append(b)

        return string
    if kind == Kind.BYTES:
        def byte_string(v: Any, out: list[bytes]) -> None:
            b = _as_bytes(v)
            out.append(length(len(b)))
            out.append(b)

        return byte_string
    if kind == Kind.FIXED:
        size = t.size

        def fixed(v: Any, out: list[bytes]) -> None:
            b = _as_bytes(v)
            if len(b) != size:
                raise ValueError(f"expected exactly {size} bytes, got {len(b)}")
            out.append(b)

        return fixed
    if kind == Kind.LIST:
        return list_encoder(t.item, fmt)  # type: ignore[arg-type]
    fields = [(f.name, encoder(f.type, fmt), f.type.optional)
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


def list_encoder(item: Type, fmt: str) -> Enc:
    length = length_writer(fmt)
    if not item.optional and item.kind in NP:
        kind = item.kind
        if kind in INTS and fmt != BINCODE:
            bits = 64 if kind == Kind.INT64 else 32
            maxlen = VARINT_MAX[kind]
            signed = kind != Kind.UINT32
            matrix = functools.partial(varint_matrix, maxlen=maxlen) if fmt == POSTCARD else bvarint_matrix

            def int_list_varint(v: Any, out: list[bytes]) -> None:
                a = _int_array(v, kind)
                u = zigzag_array(a, bits) if signed else a.astype("uint64")
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
    enc = encoder(item, fmt)

    def items(v: Any, out: list[bytes]) -> None:
        if not isinstance(v, (list, tuple)):
            raise TypeError(f"expected a list, got {type(v).__name__}")
        out.append(length(len(v)))
        for x in v:
            enc(x, out)

    return items
