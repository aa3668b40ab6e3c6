"""msgspec as the engine of ``msgpack`` and ``json`` when a typed schema is given.

The bytes are the bytes the untyped formats write (msgpack: maps in field order, bin for
bytes, float64 for floats; json: compact, bytes as ``{"$base64": ...}``), so a consumer
cannot tell which engine a publisher ran. What the schema adds:

- speed: msgspec encodes and decodes dicts in C (measured ~1.6x msgpack's ser+deser on
  ``point``, several times stdlib json; ``benchmarks/bench_formats.py`` has the figures).
  Large records (a ``block``, ~10 KB) gain less: decoding them is allocating their strings,
  which both engines do alike; what is left to win is on encode (``column_encoder``);
- validation on decode: a payload that does not fit the schema is refused with the field
  path (``Expected `int` <= 2147483647 - at `$.x```). On encode the values are written as
  given: validating a dict costs more than encoding it (``msgspec.convert`` is ~10x the
  encode), and the schema'd binary formats (bincode, postcard, protobuf, avro) refuse
  misfits on encode anyway. What is checked on encode is that a record declares no field
  outside the schema (``schema.undeclared_test``: one ``issuperset`` per record of a flat
  schema), since the decoder would drop such a field without a word.

A numpy array (or scalar) where the schema has a list (or a number) is written as the untyped
formats write it, as its ``tolist()``: the same bytes as the list, through msgspec's ``enc_hook``,
which msgspec calls only for types it does not know, so plain lists pay nothing for it.

Decoded records keep the keys that were sent (an absent optional field stays absent).

The annotations built here (``python_type``) are also what ``checks.validator``, the check the
other typed formats run on encode, converts records to.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from ..schema import INTS, Kind, RecordSchema, Type, undeclared_column_test, undeclared_test


class B64(bytes):
    """A JSON bytes field, sent as ``{"$base64": ...}`` (decoded by ``_dec_hook``)."""

    size = 0


def _dec_hook(t: type, obj: Any) -> Any:
    if isinstance(t, type) and issubclass(t, B64):
        if type(obj) is not dict or len(obj) != 1 or "$base64" not in obj:
            raise ValueError('expected bytes as {"$base64": "..."}')
        b = base64.b64decode(obj["$base64"], validate=True)
        if t.size and len(b) != t.size:
            raise ValueError(f"expected exactly {t.size} bytes, got {len(b)}")
        return t(b)
    raise NotImplementedError(f"type {t!r}")


def _enc_hook(obj: Any) -> Any:
    """What msgspec cannot write: a numpy array or scalar as its list or number, as the untyped
    formats write it (``tolist``), so a ``list<float64>`` field takes an array. msgspec calls this only
    for types it does not know, so plain lists pay nothing for it."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")


def python_type(t: Type, json: bool, names: dict[str, int]) -> Any:
    """The annotation msgspec validates ``t`` with."""
    import msgspec

    kind = t.kind
    if kind in INTS:
        lo, hi = INTS[kind]
        out: Any = Annotated[int, msgspec.Meta(ge=lo, le=hi)]
    elif kind in (Kind.FLOAT32, Kind.FLOAT64):
        out = float
    elif kind == Kind.BOOL:
        out = bool
    elif kind == Kind.STRING:
        out = str
    elif kind in (Kind.BYTES, Kind.FIXED):
        if json:
            out = type(f"B64_{t.size}", (B64,), {"size": t.size}) if kind == Kind.FIXED else B64
        else:
            out = Annotated[bytes, msgspec.Meta(min_length=t.size, max_length=t.size)] if kind == Kind.FIXED else bytes
    elif kind == Kind.LIST:
        out = list[python_type(t.item, json, names)]  # type: ignore[arg-type, misc]
    else:
        out = typed_dict(t.record, json, names)  # type: ignore[arg-type]
    return out | None if t.optional else out


def typed_dict(schema: RecordSchema, json: bool, names: dict[str, int] | None = None) -> Any:
    """A ``TypedDict`` for the record (optional fields may be absent), built at run time."""
    if sys.version_info >= (3, 11):
        from typing import NotRequired
    else:  # pragma: no cover - Python 3.10
        from typing_extensions import NotRequired

    names = {} if names is None else names
    annotations = {}
    for f in schema.fields:
        ann = python_type(f.type, json, names)
        annotations[f.name] = NotRequired[ann] if f.type.optional else ann
    return TypedDict(unique_name(schema.name, names), annotations)  # type: ignore[operator]


def declared_only(schema: RecordSchema, write: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """``write`` for records (or a framed list of them) that declare no field outside ``schema``; a record
    that does raises, naming the field(s) and their path."""
    fits = undeclared_test(schema)

    def encode(value: Any) -> bytes:
        if fits(value):
            return write(value)
        raise ValueError(schema.check(value) or "a record has a field the schema does not declare")

    return encode


def unique_name(name: str, names: dict[str, int]) -> str:
    """``name``, or ``name<k>`` for its k-th reuse in one schema (two nested records may share a name)."""
    n = names.get(name, 0)
    names[name] = n + 1
    return name if not n else f"{name}{n}"


def _b64_writer(t: Type) -> Callable[[Any], Any]:
    """Value -> the same value with its bytes as ``{"$base64": ...}`` (only where the schema has bytes)."""
    if not t.contains(Kind.BYTES, Kind.FIXED):
        return lambda v: v
    if t.kind in (Kind.BYTES, Kind.FIXED):
        b64 = base64.b64encode

        def tag(v: Any) -> Any:
            if isinstance(v, (bytes, bytearray, memoryview)):
                return {"$base64": b64(v).decode("ascii")}
            return v  # None or a misfit: written as is, refused by the reader

        return tag
    if t.kind == Kind.LIST:
        item = _b64_writer(t.item)  # type: ignore[arg-type]

        def items(v: Any) -> Any:
            if type(v) is not list:
                if not hasattr(v, "tolist"):
                    return v  # None or a misfit
                v = v.tolist()  # a numpy array of bytes: tagged like a list
            return [item(x) for x in v]

        return items
    fields = [(f.name, _b64_writer(f.type), f.type.contains(Kind.BYTES, Kind.FIXED)) for f in t.record.fields]  # type: ignore[union-attr]
    with_bytes = [(name, fn) for name, fn, has in fields if has]

    def record(v: Any) -> Any:
        if type(v) is not dict:
            return v
        out = dict(v)
        for name, fn in with_bytes:
            if name in out and out[name] is not None:
                out[name] = fn(out[name])
        return out

    return record


# msgspec's ``Encoder.encode`` starts every payload in a buffer of about this size and regrows it
# by copies; past it, writing into one reused bytearray (``encode_into``) and copying out once is
# faster (measured: 1.3-1.4x the encode from ~1 KB up, a 10 KB block record 4.7 -> 3.4 us), and
# below it slower (two calls per record instead of one: 2x on ``point``).
LARGE_PAYLOAD = 512


def column_encoder(schema: RecordSchema, encode: Callable[[Any], bytes], encode_into: Callable[[Any, bytearray], Any],
                   prepare: Callable[[Any], Any] | None = None) -> Callable[[list[Any]], list[bytes]]:
    """A whole-batch encoder writing the bytes ``encode`` writes (records, or framed messages: lists of them);
    the first record's size picks the way.

    ``prepare`` turns a value into what msgspec writes (JSON's bytes tags), when the schema needs it.
    The buffer is local to the call, so one operator may encode batches from several threads. A batch
    with a record that declares a field outside ``schema`` raises (``serialize`` redoes it record by
    record, with ``declared_only``'s encoder, so only that record is refused).
    """
    all_fit = undeclared_column_test(schema)

    def encode_column(values: list[Any]) -> list[bytes]:
        if values and type(values[0]) is list:  # framed messages: every record of them checked at once
            if not all_fit([r for m in values for r in m]):
                raise ValueError("a record has a field the schema does not declare")
            return [encode(m) for m in values]
        if not all_fit(values):
            raise ValueError("a record has a field the schema does not declare")
        if not values or len(encode(values[0])) < LARGE_PAYLOAD:
            return [encode(v) for v in values]
        buf = bytearray()
        if prepare is None:
            return [encode_into(v, buf) or bytes(buf) for v in values]  # encode_into returns None
        return [encode_into(prepare(v), buf) or bytes(buf) for v in values]

    return encode_column


def msgpack_column_encoder(schema: RecordSchema) -> Callable[[list[Any]], list[bytes]]:
    """The batch form of ``msgpack_codec``'s encoder (same bytes)."""
    import msgspec

    encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
    return column_encoder(schema, encoder.encode, encoder.encode_into)


def json_column_encoder(schema: RecordSchema) -> Callable[[list[Any]], list[bytes]]:
    """The batch form of ``json_codec``'s encoder (same bytes)."""
    import msgspec

    encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
    prepare = _json_writer(schema)
    return column_encoder(schema, _prepared(encoder.encode, prepare), encoder.encode_into, prepare)


def _prepared(encode: Callable[[Any], bytes], prepare: Callable[[Any], Any] | None) -> Callable[[Any], bytes]:
    if prepare is None:
        return encode
    return lambda value: encode(prepare(value))


def _json_writer(schema: RecordSchema) -> Callable[[Any], Any] | None:
    """A record, or a list of records (framed) -> what msgspec writes; None when the schema has no bytes."""
    rec = Type(Kind.RECORD, record=schema)
    if not rec.contains(Kind.BYTES, Kind.FIXED):
        return None
    prepare = _b64_writer(rec)
    return lambda value: [prepare(r) for r in value] if type(value) is list else prepare(value)


def msgpack_codec(schema: RecordSchema, framed: bool = False) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(encode, decode) for msgpack with ``schema``; ``framed``: a message is a list of records."""
    import msgspec

    encode = declared_only(schema, msgspec.msgpack.Encoder(enc_hook=_enc_hook).encode)
    td = typed_dict(schema, json=False)
    decode = msgspec.msgpack.Decoder(list[td] if framed else td).decode  # type: ignore[valid-type]
    # msgspec's own errors name the path (``Expected `int`, got `str` - at `$.y```); the batch turns
    # them into per-record rejections, so no wrapper frame is paid per record here.
    return encode, decode


def json_codec(schema: RecordSchema, framed: bool = False) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(encode, decode) for json with ``schema``: the wirepipe JSON dialect, bytes as ``{"$base64": ...}``."""
    import msgspec

    encode = declared_only(schema, _prepared(msgspec.json.Encoder(enc_hook=_enc_hook).encode, _json_writer(schema)))
    td = typed_dict(schema, json=True)
    decode = msgspec.json.Decoder(list[td] if framed else td, dec_hook=_dec_hook).decode  # type: ignore[valid-type]
    return encode, decode
