"""Schemaless document formats of the reference tables (``bench --reference-tables``): BSON, FlexBuffers and TOML.

Each top level must be a document (a mapping with string keys). A value that is not one (a
list of records framed into one message, a bare number) is carried as ``{"$value": v}`` and
unwrapped on decode, so framing works with every format.

- ``bson`` (pymongo's ``bson``): bytes as binary subtype 0, integers as int32 or int64 by value;
  integers past int64 are refused per record. With a typed schema a record that does not fit it
  is refused with the field path (``codecs/checks.py``'s ``validator``), and integers take the schema's
  BSON type as Rust's ``bson`` crate writes them: int32 as int32, uint32 and int64 as int64
  (a u32 may not fit an int32), so a Rust peer's struct and wirepipe write the same document
  (the Large Vectors table's 960,615 bytes). int64 values read back as ``bson.Int64``, an ``int``.
- ``flexbuffers`` (the ``flatbuffers`` package, pure Python, so slow: it is here because the
  reference tables have it): bytes as blobs. Without a schema a list is an untyped vector (a type
  byte per item, every item at the widest item's width). With a typed schema the record is
  written as Rust's flexbuffers serializer writes the struct: a numeric list is a typed vector
  at the narrowest width that holds every item and the length (the C++ and Rust builders' rule;
  float64 items at 4 bytes when f32 holds them all exactly), uint32 as UInt, float32 at 4
  bytes, absent optional fields as null; any FlexBuffers reader reads it back (the Large Vectors
  table's 264,099 bytes, where the untyped vectors take 451,103). A record with a field the schema does
  not declare, or a value that does not fit, is refused first, as bson's (``codecs/checks.py``'s
  ``validator``).
- ``toml`` (``tomllib``/``tomli`` + ``tomli-w``): TOML has neither bytes nor null. Bytes are
  written as ``{"$base64" = "..."}`` (the JSON dialect's marker, read back as bytes); a null is
  refused per record with its field path.
"""

from __future__ import annotations

import array
import base64
from collections.abc import Callable
from typing import Any

from ..core.errors import StageError
from ..schema import FLOATS, INTS, Kind, RecordSchema, Type

WRAP = "$value"
B64 = "$base64"


def _unwrap(doc: Any) -> Any:
    if type(doc) is dict and len(doc) == 1 and WRAP in doc:
        return doc[WRAP]
    return doc


def _wrap(value: Any) -> Any:
    return value if type(value) is dict else {WRAP: value}


def bson_codec(schema: RecordSchema | None = None) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    import bson

    encode_doc = bson.encode
    decode_doc = bson.decode
    errors = (bson.errors.BSONError, ValueError, IndexError, TypeError, KeyError)
    typed = _bson_ints(Type(Kind.RECORD, record=schema), bson.Int64) if schema is not None else None

    def encode(value: Any) -> bytes:
        if typed is not None:
            value = [typed(v) for v in value] if type(value) is list else typed(value)
        return encode_doc(value if type(value) is dict else {WRAP: value})

    def decode(data: bytes) -> Any:
        try:
            doc = decode_doc(data)
        except errors as exc:
            raise StageError("deserialize", "bson", f"not a BSON document ({type(exc).__name__}: {exc})") from None
        return _unwrap(doc)

    if schema is not None:  # BSON writes any value as what it is: the schema's check refuses a misfit first
        from .checks import checked, validator

        return checked(validator(schema), encode), decode
    return encode, decode


_WIDE = ("uint32", "int64")  # Rust's bson writes these as int64
_ARRAY_CODE = {"uint32": "I", "int64": "q", "int32": "i"}


def _bson_ints(t: Type, int64: Callable[[int], Any]) -> Callable[[Any], Any] | None:
    """A function that wraps the uint32 and int64 values of ``t`` in ``bson.Int64``, or None if it has none."""
    kind = t.kind
    if kind in _WIDE:  # the values were checked by the encoder's validator
        return lambda v: None if v is None else int64(v)
    if kind == Kind.LIST:
        item = t.item
        assert item is not None
        if item.kind in _WIDE and not item.optional:
            return lambda v: None if v is None else list(map(int64, v))
        each = _bson_ints(item, int64)
        if each is None:
            return None
        return lambda v: None if v is None else [each(x) for x in v]
    if kind != Kind.RECORD:
        return None
    assert t.record is not None
    convs = {f.name: c for f in t.record.fields if (c := _bson_ints(f.type, int64)) is not None}
    if not convs:
        return None

    def record(v: Any) -> Any:
        if type(v) is not dict:
            return v
        return {k: (convs[k](x) if k in convs else x) for k, x in v.items()}

    return record


_FLT_MAX = 3.4028234663852886e38
_SIGNED = {1: "b", 2: "h", 4: "i", 8: "q"}
_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _width_of_count(n: int) -> int:
    return 1 if n < 1 << 8 else 2 if n < 1 << 16 else 4 if n < 1 << 32 else 8


def _int_width(lo: int, hi: int, signed: bool) -> int:
    if signed:
        return next(w for w in (1, 2, 4, 8) if -(1 << (8 * w - 1)) <= lo and hi < 1 << (8 * w - 1))
    return next(w for w in (1, 2, 4, 8) if hi < 1 << (8 * w))


def _typed_vector(kind: str, v: Any) -> Any:
    """A numeric list as an ``array.array`` the Builder writes as a typed vector, at the narrowest width
    that holds every item and the length (what flexbuffers' C++ and Rust builders pick)."""
    if kind in INTS:
        if not v:
            return array.array(_SIGNED[1] if kind != Kind.UINT32 else _UNSIGNED[1])
        a = array.array(_ARRAY_CODE[kind], v)  # type and range checked at C speed
        signed = kind != Kind.UINT32
        width = max(_int_width(min(a), max(a), signed), _width_of_count(len(a)))
        code = (_SIGNED if signed else _UNSIGNED)[width]
        return a if a.itemsize == width else array.array(code, a)
    a = array.array("d", v)
    if kind == Kind.FLOAT32 or array.array("f", a).tolist() == a.tolist():
        # float32: the Rust struct holds an f32 (wirepipe's typed formats round to it too);
        # float64: 4 bytes only when every item is an f32 exactly (NaN is not: 8 bytes)
        return array.array("f", a) if _width_of_count(len(a)) <= 4 else a
    return a


def _flex_writer(t: Type) -> Callable[[Any, Any], None]:
    """Write one value of type ``t`` into a flexbuffers Builder, the way Rust's serializer writes the struct.

    The record was checked against the schema first (``checks.validator``, as bson's is): a writer only
    writes, so a misfit is refused with the schema's words, never written as some other value.
    """
    write = _flex_required(t)
    if not t.optional:
        return write

    def maybe(b: Any, v: Any) -> None:
        if v is None:
            b.Null()
        else:
            write(b, v)

    return maybe


def _flex_required(t: Type) -> Callable[[Any, Any], None]:
    kind = t.kind
    if kind in INTS:
        return (lambda b, v: b.UInt(v)) if kind == Kind.UINT32 else (lambda b, v: b.Int(v))
    if kind in FLOATS:
        width = 4 if kind == Kind.FLOAT32 else 0
        # Builder.Float below takes the values past FLT_MAX the library's cannot
        return lambda b, v: b.Float(float(v), width)
    if kind == Kind.BOOL:
        return lambda b, v: b.Bool(v)
    if kind == Kind.STRING:
        return lambda b, v: b.String(v)
    if kind in (Kind.BYTES, Kind.FIXED):
        return lambda b, v: b.Blob(bytes(v))
    if kind == Kind.LIST:
        assert t.item is not None
        return _flex_list(t.item)
    assert t.record is not None
    return _flex_record(t.record)


def _flex_list(item: Type) -> Callable[[Any, Any], None]:
    """A numeric list as one typed vector (``_typed_vector``); any other list item by item."""
    if (item.kind in INTS or item.kind in FLOATS) and not item.optional:
        kind = item.kind
        return lambda b, v: b.TypedVectorFromElements(_typed_vector(kind, v))
    each = _flex_writer(item)

    def items(b: Any, v: Any) -> None:
        with b.Vector():
            for x in v:
                each(b, x)

    return items


def _flex_record(schema: RecordSchema) -> Callable[[Any, Any], None]:
    """A map of every field in schema order, absent optional ones as null."""
    fields = [(f.name, _flex_writer(f.type), f.type.optional) for f in schema.fields]

    def record(b: Any, v: Any) -> None:
        with b.Map():
            for name, write, optional in fields:
                b.Key(name)
                write(b, v.get(name) if optional else v[name])

    return record


def _blob_restorer(t: Type) -> Callable[[Any], Any] | None:
    """Blobs (bytearray) back to bytes where the schema has bytes; None where ``t`` holds none."""
    kind = t.kind
    if kind in (Kind.BYTES, Kind.FIXED):
        return lambda v: bytes(v) if type(v) in (bytearray, memoryview) else v
    if kind == Kind.LIST:
        assert t.item is not None
        each = _blob_restorer(t.item)
        return None if each is None else (lambda v: [each(x) for x in v] if type(v) is list else v)
    if kind != Kind.RECORD:
        return None
    assert t.record is not None
    convs = {f.name: c for f in t.record.fields if (c := _blob_restorer(f.type)) is not None}
    if not convs:
        return None
    return lambda v: {k: (convs[k](x) if k in convs else x) for k, x in v.items()} if type(v) is dict else v


def flexbuffers_codec(schema: RecordSchema | None = None) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    from flatbuffers import flexbuffers

    class Builder(flexbuffers.Builder):
        """flatbuffers' Builder tries float32 with struct.pack('<f'), which raises for finite values
        just above FLT_MAX instead of falling back to float64 (a library bug): pick 8 bytes for them."""

        def Float(self, value: float, byte_width: int = 0) -> None:  # the library's method name
            if byte_width == 0 and _FLT_MAX < abs(value) < float("inf"):
                byte_width = 8
            super().Float(value, byte_width)

    loads = flexbuffers.Loads
    rec = Type(Kind.RECORD, record=schema) if schema is not None else None
    write = _flex_writer(rec) if rec is not None else None
    restore = (_blob_restorer(rec) if rec is not None else _restore_blobs) or (lambda v: v)
    restore_framed = (lambda v: [restore(r) for r in v] if type(v) is list else restore(v)) if rec is not None \
        else restore

    def encode(value: Any) -> bytes:
        b = Builder()
        if write is None:
            b.Add(_wrap(value))
        elif type(value) is list:  # a framed message: {"$value": [records]}
            with b.Map():
                b.Key(WRAP)
                with b.Vector():
                    for r in value:
                        write(b, r)
        else:
            write(b, value)
        return bytes(b.Finish())

    def decode(data: bytes) -> Any:
        try:
            doc = loads(data)
        except Exception as exc:  # the pure-Python reader raises whatever its indexing hits
            raise StageError("deserialize", "flexbuffers", f"not a FlexBuffer ({type(exc).__name__}: {exc})") \
                from None
        if type(doc) is not dict:
            raise StageError("deserialize", "flexbuffers", f"expected a map at the root, got {type(doc).__name__}")
        return restore_framed(_unwrap(doc))

    if schema is not None:  # the writers only write: the schema's check refuses a misfit first
        from .checks import checked, validator

        return checked(validator(schema), encode), decode
    return encode, decode


def _restore_blobs(value: Any) -> Any:
    """FlexBuffers blobs come back as bytearray (or memoryview): wirepipe's bytes are bytes."""
    t = type(value)
    if t is dict:
        return {k: _restore_blobs(v) for k, v in value.items()}
    if t is list:
        return [_restore_blobs(v) for v in value]
    if t in (bytearray, memoryview):
        return bytes(value)
    return value


def _toml_ready(value: Any, path: str) -> Any:
    t = type(value)
    if t is dict:
        return {k: _toml_ready(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if t in (list, tuple):
        return [_toml_ready(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if t in (bytes, bytearray, memoryview):
        return {B64: base64.b64encode(value).decode("ascii")}
    if value is None:
        raise StageError("serialize", "toml", f"{path or 'value'}: null has no TOML form (TOML has no null)")
    return value


def toml_codec(restore_bytes: Callable[[Any], Any]) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """``restore_bytes`` is the JSON dialect's reader of ``{"$base64": ...}`` (``formats.restore_bytes``)."""
    import sys

    import tomli_w

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    dumps = tomli_w.dumps
    loads = tomllib.loads
    error = tomllib.TOMLDecodeError

    def encode(value: Any) -> bytes:
        return dumps(_toml_ready(_wrap(value), "")).encode("utf-8")

    def decode(data: bytes) -> Any:
        try:
            doc = loads(str(data, "utf-8"))
        except (error, UnicodeDecodeError) as exc:
            raise StageError("deserialize", "toml", f"not a TOML document ({exc})") from None
        return _unwrap(restore_bytes(doc) if b'"$base64"' in data else doc)

    return encode, decode
