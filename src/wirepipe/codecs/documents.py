"""Schemaless document formats of the seed tables: BSON, FlexBuffers and TOML.

Each top level must be a document (a mapping with string keys). A value that is not one (a
list of records framed into one message, a bare number) is carried as ``{"$value": v}`` and
unwrapped on decode, so framing works with every format.

- ``bson`` (pymongo's ``bson``): bytes as binary subtype 0, integers as int32 or int64 by value;
  integers past int64 are refused per record.
- ``flexbuffers`` (the ``flatbuffers`` package, pure Python, so slow: it is here because the
  seed tables have it): bytes as blobs.
- ``toml`` (``tomllib``/``tomli`` + ``tomli-w``): TOML has neither bytes nor null. Bytes are
  written as ``{"$base64" = "..."}`` (the JSON dialect's marker, read back as bytes); a null is
  refused per record with its field path.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from ..errors import StageError

WRAP = "$value"
B64 = "$base64"


def _unwrap(doc: Any) -> Any:
    if type(doc) is dict and len(doc) == 1 and WRAP in doc:
        return doc[WRAP]
    return doc


def _wrap(value: Any) -> Any:
    return value if type(value) is dict else {WRAP: value}


def bson_codec() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    import bson

    encode_doc = bson.encode
    decode_doc = bson.decode
    errors = (bson.errors.BSONError, ValueError, IndexError, TypeError, KeyError)

    def encode(value: Any) -> bytes:
        return encode_doc(value if type(value) is dict else {WRAP: value})

    def decode(data: bytes) -> Any:
        try:
            doc = decode_doc(data)
        except errors as exc:
            raise StageError("deserialize", "bson", f"not a BSON document ({type(exc).__name__}: {exc})") from None
        return _unwrap(doc)

    return encode, decode


_FLT_MAX = 3.4028234663852886e38


def flexbuffers_codec() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    from flatbuffers import flexbuffers

    class Builder(flexbuffers.Builder):
        """flatbuffers' Builder tries float32 with struct.pack('<f'), which raises for finite values
        just above FLT_MAX instead of falling back to float64 (a library bug): pick 8 bytes for them."""

        def Float(self, value: float, byte_width: int = 0) -> None:  # the library's method name
            if byte_width == 0 and _FLT_MAX < abs(value) < float("inf"):
                byte_width = 8
            super().Float(value, byte_width)

    loads = flexbuffers.Loads

    def encode(value: Any) -> bytes:
        b = Builder()
        b.Add(_wrap(value))
        return bytes(b.Finish())

    def decode(data: bytes) -> Any:
        try:
            doc = loads(data)
        except Exception as exc:  # the pure-Python reader raises whatever its indexing hits
            raise StageError("deserialize", "flexbuffers", f"not a FlexBuffer ({type(exc).__name__}: {exc})") \
                from None
        if type(doc) is not dict:
            raise StageError("deserialize", "flexbuffers", f"expected a map at the root, got {type(doc).__name__}")
        return _restore_blobs(_unwrap(doc))

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
        raise ValueError(f"{path or 'value'}: null has no TOML form (TOML has no null)")
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
