"""Serialization formats: one registry of encoders and decoders, built once per operator.

Rules every format follows:
- bytes stay bytes wherever the format has a binary type (msgpack, cbor, arrow, pickle);
  JSON has none, so bytes are written as ``{"$base64": "<standard base64>"}`` and read
  back as bytes (the feed JSON benchmark's lesson: the base64 step is real cost, and it is measured);
- ``msgpack-array`` is positional: the field order comes from a schema (the "schema"
  rows of the FlatMessage tables), never guessed from one record;
- ``pickle`` runs code from the payload when loaded, so its decoder is only built when
  the pipeline says ``allow_pickle: true``;
- ``typed`` formats (protobuf, avro, bincode, postcard) are built from a typed schema
  (``wirepipe.schema.RecordSchema``); ``msgpack`` and ``json`` given one run on msgspec
  (same bytes, validated on decode). Options a format takes (``framed``: a message is a list
  of records; ``schema_id``: Avro's Confluent framing) are passed through ``encoder``/``decoder``;
- a schema never drops a field: a format that ``checks_schema`` refuses, on encode, a record
  with a field its schema does not declare (and, but for msgpack and json, which check types on
  decode, a value that does not fit); ``serialize`` checks records itself for the others.

A format is a plugin: a ``Format`` entry here whose factories import their library lazily,
so ``wirepipe codecs`` lists it (installed or not) without importing it.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import RefusedError, StageError
from ..core.records import as_dict, is_typed_record
from ..core.registry import Registry, install_hint, library_installed

Encoder = Callable[[Any], bytes]
Decoder = Callable[[bytes], Any]
ColumnEncoder = Callable[[list[Any]], list[bytes]]
ColumnDecoder = Callable[[list[bytes]], list[Any]]
Schema = Sequence[str] | None  # a RecordSchema is a Sequence of its field names, with types
B64 = "$base64"
TYPED_HELP = ("a dataset name, a schema file (.yaml, .json, .avsc, a protobuf .proto or descriptor set .desc), "
              "an inline mapping {field: type}, or module:Class")


@dataclass(frozen=True)
class Format:
    """A serialization format: its wire name and how to build its encoder and decoder."""

    name: str
    library: str
    content_type: str
    make_encoder: Callable[[Schema], Encoder] = field(repr=False)
    make_decoder: Callable[[Schema], Decoder] = field(repr=False)
    binary: bool = True
    needs_schema: bool = False
    unsafe: bool = False
    note: str = ""
    typed: bool = False  # needs a typed RecordSchema, not only field names
    # Given a schema, its encoder refuses a record with a field the schema does not declare (the typed
    # formats also a value that does not fit, msgpack and json on decode): serialize checks the others.
    checks_schema: bool = False
    options: tuple[str, ...] = ()  # keyword options its factories take (framed, schema_id)
    make_column_encoder: Callable[..., ColumnEncoder | None] | None = field(default=None, repr=False)
    make_column_decoder: Callable[..., ColumnDecoder] | None = field(default=None, repr=False)
    extra: str = ""  # the pip extra that installs its library (wirepipe[extra]); "" for the core

    def available(self) -> bool:
        return library_installed(self.library)

    def require(self) -> None:
        """``ValueError`` naming the extra to install when the format's library is missing."""
        if not self.available():
            raise ValueError(f"format {self.name} needs {self.library}, which is not installed: "
                             f"{install_hint(self.extra)}")

    def encoder(self, schema: Schema = None, **options: Any) -> Encoder:
        self.require()
        self._check_schema(schema)
        return self.make_encoder(schema, **self._options(options))

    def column_encoder(self, schema: Schema = None, **options: Any) -> ColumnEncoder | None:
        """A whole-batch encoder (a payload per value: a record, or a framed list of records) when the format
        has one, else None."""
        if self.make_column_encoder is None:
            return None
        self.require()
        self._check_schema(schema)
        return self.make_column_encoder(schema, **self._options(options))

    def column_decoder(self, schema: Schema = None, **options: Any) -> ColumnDecoder | None:
        """A whole-batch decoder (one record per payload, a list of records with ``framed``) when the format has
        one, else None."""
        if self.make_column_decoder is None:
            return None
        self.require()
        self._check_schema(schema)
        return self.make_column_decoder(schema, **self._options(options))

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        given = {k: v for k, v in options.items() if v is not None and v is not False}
        if "framed" in given and "framed" not in self.options and not self.needs_schema:
            del given["framed"]  # self-describing: a list of records is read as a list anyway
        bad = [k for k in given if k not in self.options]
        if bad:
            allowed = ", ".join(self.options) or "none"
            raise ValueError(f"format {self.name} takes no option {', '.join(bad)} (its options: {allowed})")
        return given

    def decoder(self, schema: Schema = None, *, allow_pickle: bool = False, **options: Any) -> Decoder:
        self.require()
        if self.unsafe and not allow_pickle:
            raise RefusedError(
                "deserialize",
                self.name,
                "pickle runs code from the payload when it is loaded, so wirepipe does not decode it "
                "unless the pipeline sets allow_pickle: true (do that only if every publisher is trusted)",
            )
        self._check_schema(schema)
        return self.make_decoder(schema, **self._options(options))

    def _check_schema(self, schema: Schema) -> None:
        if self.typed and not _is_typed(schema):
            got = f" (got the field names {list(schema)}, without types)" if schema else ""
            raise ValueError(f"{self.name} needs a typed schema{got}: set `schema:` to {TYPED_HELP}")
        if self.needs_schema and not schema:
            raise ValueError(
                f"{self.name} is positional and needs a schema: set `schema:` to a dataset name, "
                "a list of field names, or module:RecordClass"
            )


def _is_typed(schema: Schema) -> bool:
    from ..schema import RecordSchema

    return isinstance(schema, RecordSchema)


# --- JSON: bytes as {"$base64": ...} -----------------------------------------------------------


def json_default(obj: Any) -> Any:
    """JSON for what JSON lacks: bytes as {"$base64": ...}, numpy as lists, a typed record (a ``faust.Record``, a
    pydantic model) as the dict of its fields (``core.records``)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {B64: base64.b64encode(obj).decode("ascii")}
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return obj.tolist()
    if is_typed_record(obj):
        return as_dict(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _b64_hook(d: dict[str, Any]) -> Any:
    if len(d) == 1 and B64 in d:
        return base64.b64decode(d[B64], validate=True)
    return d


def restore_bytes(obj: Any) -> Any:
    """Turn every ``{"$base64": ...}`` inside a decoded JSON value back into bytes."""
    if isinstance(obj, dict):
        if len(obj) == 1 and B64 in obj:
            return base64.b64decode(obj[B64], validate=True)
        return {k: restore_bytes(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [restore_bytes(v) for v in obj]
    return obj


B64_MARK = b'"$base64"'  # present in a JSON payload only when it carries bytes


def _json_encoder(schema: Schema, framed: bool = False) -> Encoder:
    if _is_typed(schema):
        from .msgspec_engine import json_codec

        return json_codec(schema, framed)[0]  # type: ignore[arg-type]
    import json

    encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=json_default,
                              allow_nan=False).encode
    return lambda value: encode(value).encode("utf-8")


def _json_decoder(schema: Schema, framed: bool = False) -> Decoder:
    if _is_typed(schema):
        from .msgspec_engine import json_codec

        return json_codec(schema, framed)[1]  # type: ignore[arg-type]
    import json

    plain = json.JSONDecoder().decode
    tagged = json.JSONDecoder(object_hook=_b64_hook).decode

    def decode(data: bytes) -> Any:
        text = str(data, "utf-8")
        # The hook costs a call per object: pay it only when the payload carries bytes.
        return tagged(text) if B64_MARK in data else plain(text)

    return decode


def _orjson_encoder(_schema: Schema) -> Encoder:
    import orjson

    dumps = orjson.dumps
    option = orjson.OPT_SERIALIZE_NUMPY
    return lambda value: dumps(value, default=json_default, option=option)


def _orjson_decoder(_schema: Schema) -> Decoder:
    import orjson

    loads = orjson.loads

    def decode(data: bytes) -> Any:
        value = loads(data)
        return restore_bytes(value) if B64_MARK in data else value

    return decode


# --- msgpack -------------------------------------------------------------------------------


def _msgpack_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not msgpack serializable")


def _msgpack_encoder(schema: Schema, framed: bool = False) -> Encoder:
    if _is_typed(schema):
        from .msgspec_engine import msgpack_codec

        return msgpack_codec(schema, framed)[0]  # type: ignore[arg-type]
    import msgpack

    return msgpack.Packer(use_bin_type=True, default=_msgpack_default).pack


def _msgspec_column_encoder(schema: Schema, framed: bool = False, *, json: bool) -> ColumnEncoder | None:
    """With a typed schema, msgspec's batch encoder (same bytes); untyped, None: the per-record path as is."""
    if not _is_typed(schema):
        return None
    from .msgspec_engine import json_column_encoder, msgpack_column_encoder

    return (json_column_encoder if json else msgpack_column_encoder)(schema)  # type: ignore[arg-type]


def _msgpack_decoder(schema: Schema, framed: bool = False) -> Decoder:
    if _is_typed(schema):
        from .msgspec_engine import msgpack_codec

        return msgpack_codec(schema, framed)[1]  # type: ignore[arg-type]
    import msgpack

    # raw=False (str as str) and strict_map_key=True are msgpack's defaults since 1.0; passing
    # them as keywords would cost ~100 ns per record.
    return msgpack.unpackb


def _msgpack_array_encoder(schema: Schema) -> Encoder:
    """Positional: the fields in schema order. With a typed schema each record is checked first
    (``codecs/checks.py``'s ``validator``: a misfit would be written as it is, a field the schema does not
    declare left out); with field names alone, only that it declares no other field."""
    import operator

    import msgpack

    from ..schema import undeclared, undeclared_test

    fields = tuple(schema or ())
    pack = msgpack.Packer(use_bin_type=True, default=_msgpack_default).pack
    if _is_typed(schema) and any(f.type.optional for f in schema.fields):  # type: ignore[union-attr]
        write: Encoder = lambda record: pack([record.get(f) for f in fields])  # noqa: E731 - absent: None
    elif len(fields) == 1:
        only = fields[0]
        write = lambda record: pack((record[only],))  # noqa: E731
    else:
        get = operator.itemgetter(*fields)
        write = lambda record: pack(get(record))  # noqa: E731
    if _is_typed(schema):
        from .checks import checked, validator

        return checked(validator(schema), write)  # type: ignore[arg-type]
    fits = undeclared_test(fields)

    def encode(record: Any) -> bytes:
        if not fits(record):
            raise ValueError(undeclared(fields, record))
        return write(record)

    return encode


def _msgpack_array_decoder(schema: Schema) -> Decoder:
    import msgpack

    fields = tuple(schema or ())
    unpackb = msgpack.unpackb
    n = len(fields)

    def decode(data: bytes) -> dict[str, Any]:
        row = unpackb(data)
        if type(row) is not list or len(row) != n:
            got = f"{len(row)} fields" if isinstance(row, list) else type(row).__name__
            raise StageError("deserialize", "msgpack-array", f"schema mismatch: expected {n} fields {list(fields)}, got {got}")
        return dict(zip(fields, row, strict=False))

    return decode


# --- cbor, pickle --------------------------------------------------------------------------------


def _cbor_encoder(_schema: Schema) -> Encoder:
    import cbor2

    return lambda value: cbor2.dumps(value, default=_cbor_default)


def _cbor_default(encoder: Any, obj: Any) -> None:
    if hasattr(obj, "tolist"):
        encoder.encode(obj.tolist())
        return
    raise TypeError(f"{type(obj).__name__} is not CBOR serializable")


def _cbor_decoder(_schema: Schema) -> Decoder:
    import cbor2

    return cbor2.loads


def _pickle_encoder(_schema: Schema) -> Encoder:
    import functools
    import pickle

    return functools.partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)


def _pickle_decoder(_schema: Schema) -> Decoder:
    import pickle

    return pickle.loads


# --- Arrow IPC: one stream per message, numpy columns zero-copy ----------------------------------

_WRAPPED = b"wirepipe.wrapped"  # a value that is not a record, stored as column "value"
_ROWS = b"wirepipe.rows"  # a list of records (a packed message), one row each


def _arrow_encoder(_schema: Schema) -> Encoder:
    import numpy as np
    import pyarrow as pa

    ndarray = np.ndarray

    def column(value: Any) -> Any:
        if isinstance(value, ndarray) and value.ndim == 1:
            # One list cell whose child array is the numpy buffer itself: no copy.
            offsets = pa.array([0, len(value)], type=pa.int32())
            return pa.ListArray.from_arrays(offsets, pa.array(value))
        return pa.array([value])

    def encode(value: Any) -> bytes:
        if type(value) is list and value and all(type(r) is dict and r for r in value):
            # A packed message (several records): one IPC stream with one row per record.
            batch = pa.RecordBatch.from_pylist(value).replace_schema_metadata({_ROWS: b"1"})
        else:
            wrapped = not isinstance(value, dict) or not value
            record = {"value": value} if wrapped else value
            arrays = [column(v) for v in record.values()]
            batch = pa.RecordBatch.from_arrays(arrays, names=list(record))
            if wrapped:
                batch = batch.replace_schema_metadata({_WRAPPED: b"1"})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()

    return encode


def _arrow_decoder(_schema: Schema) -> Decoder:
    import pyarrow as pa

    open_stream = pa.ipc.open_stream

    def decode(data: bytes) -> Any:
        try:
            reader = open_stream(pa.py_buffer(data))
            batch = reader.read_next_batch()
        except (pa.ArrowInvalid, StopIteration, OSError) as exc:
            raise StageError("deserialize", "arrow", f"not an Arrow IPC stream ({exc or 'empty'})") from None
        meta = batch.schema.metadata or {}
        if meta.get(_ROWS) == b"1":
            return batch.to_pylist()
        if batch.num_rows != 1:
            raise StageError("deserialize", "arrow", f"expected one record per message, got {batch.num_rows}")
        row = {name: batch.column(i)[0].as_py() for i, name in enumerate(batch.schema.names)}
        return row["value"] if meta.get(_WRAPPED) == b"1" else row

    return decode


# --- formats from the typed schema, and the reference tables' document formats -------------------


def _protobuf(schema: Schema, framed: bool = False) -> tuple[Encoder, Decoder]:
    from .protobuf import codec

    return codec(schema, framed)  # type: ignore[arg-type]


def _avro(schema: Schema, framed: bool = False, schema_id: int | None = None) -> tuple[Encoder, Decoder]:
    from .avro import codec

    return codec(schema, framed, schema_id)  # type: ignore[arg-type]


def _layout(name: str) -> Callable[..., Any]:
    def make(schema: Schema, framed: bool = False) -> Any:
        from .layout import Layout

        return Layout(schema, name)  # type: ignore[arg-type]

    return make


def _pair(build: Callable[..., tuple[Encoder, Decoder]]) -> tuple[Callable[..., Encoder], Callable[..., Decoder]]:
    """Encoder and decoder factories from one factory of both."""
    return (lambda schema, **o: build(schema, **o)[0]), (lambda schema, **o: build(schema, **o)[1])


def _layout_format(name: str, note: str) -> Format:
    make = _layout(name)
    return Format(name, "numpy", f"application/vnd.wirepipe.{name}",
                  lambda schema, **o: make(schema).encode,
                  functools.partial(_layout_decoder_for, make),
                  typed=True, needs_schema=True, checks_schema=True, options=("framed",), note=note,
                  make_column_encoder=lambda schema: make(schema).encode_column,
                  make_column_decoder=lambda schema, framed=False: make(schema).decode_framed_column if framed
                  else make(schema).decode_column)


def _layout_decoder(layout: Any, framed: bool) -> Decoder:
    decode: Decoder = layout.decode_framed if framed else layout.decode
    return decode


def _layout_decoder_for(make: Any, schema: Any, framed: bool = False) -> Decoder:
    return _layout_decoder(make(schema), framed)


def _schemaless(build: Callable[[], tuple[Encoder, Decoder]]) -> tuple[Callable[..., Encoder], Callable[..., Decoder]]:
    return (lambda _schema: build()[0]), (lambda _schema: build()[1])


def _typed_document(build: Callable[[Any], tuple[Encoder, Decoder]]) -> tuple[Callable[..., Encoder], Callable[..., Decoder]]:
    """A document format that writes the schema's types when given a typed schema (bson, flexbuffers)."""
    return (lambda schema: build(schema if _is_typed(schema) else None)[0]), \
        (lambda schema: build(schema if _is_typed(schema) else None)[1])


def _bson(schema: Any) -> tuple[Encoder, Decoder]:
    from .documents import bson_codec

    return bson_codec(schema)


def _flexbuffers(schema: Any) -> tuple[Encoder, Decoder]:
    from .documents import flexbuffers_codec

    return flexbuffers_codec(schema)


def _toml() -> tuple[Encoder, Decoder]:
    from .documents import toml_codec

    return toml_codec(restore_bytes)


FORMATS: Registry[Format] = Registry("wirepipe.formats", {
    f.name: f
    for f in (
        Format("json", "json", "application/json", _json_encoder, _json_decoder, binary=False,
               options=("framed",), make_column_encoder=functools.partial(_msgspec_column_encoder, json=True),
               checks_schema=True,
               note='stdlib; bytes as {"$base64": ...}; msgspec with a typed schema (same bytes)'),
        Format("orjson", "orjson", "application/json", _orjson_encoder, _orjson_decoder, binary=False,
               note='same JSON as json, faster; bytes as {"$base64": ...}'),
        Format("msgpack", "msgpack", "application/msgpack", _msgpack_encoder, _msgpack_decoder,
               options=("framed",), make_column_encoder=functools.partial(_msgspec_column_encoder, json=False),
               checks_schema=True,
               note="msgspec with a typed schema (same bytes, validated on decode)"),
        Format("msgpack-array", "msgpack", "application/vnd.wirepipe.msgpack-array",
               _msgpack_array_encoder, _msgpack_array_decoder, needs_schema=True, checks_schema=True,
               note="positional: a msgpack array in schema field order"),
        Format("cbor", "cbor2", "application/cbor", _cbor_encoder, _cbor_decoder, extra="cbor"),
        Format("arrow", "pyarrow", "application/vnd.apache.arrow.stream", _arrow_encoder, _arrow_decoder,
               note="Arrow IPC stream, one record per message; numpy arrays zero-copy"),
        Format("pickle", "pickle", "application/x-python-pickle", _pickle_encoder, _pickle_decoder,
               unsafe=True, note="never decoded unless allow_pickle: true"),
        Format("protobuf", "google.protobuf", "application/x-protobuf", *_pair(_protobuf), typed=True, needs_schema=True,
               checks_schema=True, options=("framed",), extra="protobuf",
               note="message built at run time from the schema (no protoc), or .proto (the proto extra) / .desc / "
                    "module:Class"),
        Format("avro", "fastavro", "application/avro", *_pair(_avro), typed=True, needs_schema=True, checks_schema=True,
               options=("framed", "schema_id"), extra="avro",
               note="schemaless Avro binary; schema_id: N adds the Confluent framing"),
        _layout_format("bincode", "fixed layout: little-endian fixint, as Rust bincode 1 / legacy()"),
        _layout_format("postcard", "fixed layout with varints/zigzag, as Rust postcard"),
        _layout_format("bincode-varint",
                       "fixed layout with bincode 2's varints (251/252/253 + u16/u32/u64), as config::standard()"),
        Format("bson", "bson", "application/bson", *_typed_document(_bson), checks_schema=True,
               extra="bson", note="pymongo's bson; typed schema: uint32/int64 as int64, as Rust's bson"),
        Format("flexbuffers", "flatbuffers", "application/vnd.google.flexbuffers", *_typed_document(_flexbuffers),
               checks_schema=True, extra="flexbuffers",
               note="flatbuffers package (pure Python: slow); typed schema: numeric lists as narrowest typed vectors"),
        Format("toml", "tomli_w", "application/toml", *_schemaless(_toml), binary=False, extra="toml",
               note='tomllib + tomli-w; bytes as {"$base64" = ...}; no null'),
    )
})


@functools.cache
def _by_content_type(_generation: int) -> dict[str, Format]:
    """Content type -> format, the first registered format winning (rebuilt when a format is added)."""
    table: dict[str, Format] = {}
    for f in FORMATS.values():
        table.setdefault(f.content_type, f)
    return table


def get_format(name: str) -> Format:
    """The format called ``name``; ``KeyError`` listing the known ones."""
    fmt = FORMATS.get(name)
    if fmt is None:
        from ..core.models import unknown_message

        raise KeyError(unknown_message("format", name, FORMATS))
    return fmt


def format_for_content_type(content_type: str | None) -> Format:
    """The format a ``Content-Type`` header names (parameters after ``;`` ignored)."""
    if not content_type:
        raise KeyError("no Content-Type header: cannot pick a format automatically")
    known = _by_content_type(FORMATS.generation)
    fmt = known.get(content_type.split(";", 1)[0].strip().lower())
    if fmt is None:
        raise KeyError(f"unknown Content-Type {content_type!r}: known {', '.join(known)}")
    return fmt
