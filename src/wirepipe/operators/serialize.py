"""The serialize and deserialize operators.

``Serialize`` turns the value column into payload bytes with one format and sets
``Content-Type``; ``Deserialize`` does the reverse, by a fixed format or, with
``format: auto``, by each record's ``Content-Type``.

``schema`` is one of: a dataset name (its typed schema), a schema file (``.yaml``/``.yml``/
``.json`` in wirepipe's schema language, an Avro ``.avsc``, a protobuf ``.proto`` source or
``FileDescriptorSet`` ``.desc``/``.pb``, the message named by ``message:`` or ``FILE#Message``
when the file declares several), an inline mapping ``{field: type}``,
a list of field names (untyped: enough for ``msgpack-array``), or ``module:Class`` (a
generated protobuf class gives a typed schema; other classes give their field order and,
on decode, typed records). Without one, positional formats use the schema the source
attached to the batch. A value that does not fit a typed schema is rejected per record with
the field path in the reason.

In YAML ``- serialize: {format: msgpack}``; in Python ``wirepipe.serialize("msgpack")``:

>>> from wirepipe.batch import Batch
>>> payloads = Serialize("json")(Batch([{"x": 1}, {"x": 2}]))
>>> payloads.values, payloads.headers
([b'{"x":1}', b'{"x":2}'], {'Content-Type': 'application/json'})
>>> Deserialize("auto")(payloads).values
[{'x': 1}, {'x': 2}]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..batch import Batch
from ..codecs.formats import Decoder, Encoder, Schema, format_for_content_type, get_format
from ..errors import RefusedError, StageError
from ..models import Strict
from ..schema import RecordSchema, SchemaError, explain, load_schema_file, parse_schema
from .base import BuildContext, Operator, failing

SchemaSpec = str | Sequence[str] | Mapping[str, Any] | type | RecordSchema | None
_SCHEMA_FILES = (".yaml", ".yml", ".json")
_DESCRIPTOR_SETS = (".desc", ".pb", ".binpb", ".protoset")


def resolve_schema(spec: SchemaSpec) -> RecordSchema | tuple[str, ...] | None:
    """The typed schema (or, for a list of names and plain classes, the field order) ``spec`` names."""
    if spec is None or isinstance(spec, RecordSchema):
        return spec
    if isinstance(spec, Mapping):
        return parse_schema(spec)
    if isinstance(spec, str):
        return _schema_from_text(spec)
    if isinstance(spec, type):
        return _protobuf_schema(spec) if hasattr(spec, "DESCRIPTOR") else _fields_of(spec)
    return tuple(spec)


def _schema_from_text(spec: str) -> RecordSchema | tuple[str, ...]:
    path, _, message = spec.partition("#")
    suffix = Path(path).suffix.lower()
    if suffix in _SCHEMA_FILES:
        return load_schema_file(path)
    if suffix == ".avsc":
        import json

        from ..codecs.avro import schema_of_avsc

        try:
            return schema_of_avsc(json.loads(Path(path).read_text(encoding="utf-8")))
        except OSError as exc:
            raise SchemaError("", f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            if isinstance(exc, SchemaError):
                raise
            raise SchemaError("", f"{path} is not valid JSON: {exc}") from None
    if suffix in _DESCRIPTOR_SETS:
        from ..codecs.protobuf import load_descriptor_set

        try:
            return _protobuf_schema(load_descriptor_set(path, message or None))
        except OSError as exc:
            raise SchemaError("", f"cannot read {path}: {exc.strerror or exc}") from None
    if suffix == ".proto":
        from ..codecs.protofile import load_message

        return _protobuf_schema(load_message(path, message or None))
    if ":" in spec:
        obj = import_path(spec)
        return _protobuf_schema(obj) if hasattr(obj, "DESCRIPTOR") else _fields_of(obj)
    from ..datasets import DATASETS

    if spec not in DATASETS:
        raise SchemaError("", f"{spec!r} is neither a dataset ({', '.join(DATASETS)}) nor a schema file "
                              f"(.yaml, .yml, .json, .avsc, .proto, {', '.join(_DESCRIPTOR_SETS)}) nor module:Class")
    return DATASETS[spec].schema


def _protobuf_schema(cls: Any) -> RecordSchema:
    from ..codecs.protobuf import schema_of_message

    return schema_of_message(cls.DESCRIPTOR)


def import_path(path: str) -> Any:
    import importlib

    module, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from None
    return obj


def _fields_of(cls: Any) -> tuple[str, ...]:
    """Field order of a dataclass, a faust.Record, a pydantic model or an annotated class."""
    import dataclasses

    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    options = getattr(cls, "_options", None)
    if options is not None and getattr(options, "fields", None):
        # faust.Record: declaration order (inherited fields first), under the names its
        # records carry on the wire (a field's output_name, as asdict() writes them).
        descriptors = getattr(options, "descriptors", None) or {}
        return tuple(getattr(descriptors.get(f), "output_name", None) or f for f in options.fields)
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, dict):
        return tuple(model_fields)
    annotations = getattr(cls, "__annotations__", None)
    if annotations:
        return tuple(k for k in annotations if not k.startswith("_"))
    raise ValueError(f"{cls!r} has no fields to use as a schema")


def _record_class(spec: SchemaSpec) -> type | None:
    """The class a ``module:Class`` schema names, when it can build typed records."""
    cls = import_path(spec) if isinstance(spec, str) and ":" in spec and "#" not in spec else spec
    if not isinstance(cls, type) or hasattr(cls, "DESCRIPTOR"):  # protobuf classes give typed dicts
        return None
    return cls


class Serialize(Operator):
    """Encode every value with one format; sets ``Content-Type``."""

    stage = "serialize"

    def __init__(self, format: str = "msgpack", schema: SchemaSpec = None, *, schema_id: int | None = None) -> None:
        self.format = get_format(format)
        self.name = self.format.name
        self.params = {"format": self.name} | ({"schema": _schema_param(schema)} if schema else {})
        if schema_id is not None:
            self.params["schema_id"] = schema_id
        self._options = {"schema_id": schema_id}
        self._schema: Schema = resolve_schema(schema)
        self._encode: Encoder | None = None
        self._column: Callable[[list[Any]], list[bytes]] | None = None
        if self._ready():
            self._build()
        self._content_type = self.format.content_type

    def _ready(self) -> bool:
        return not self.format.needs_schema or self._schema is not None

    def _build(self) -> None:
        self._encode = self.format.encoder(self._schema, **self._options)
        self._column = self.format.column_encoder(self._schema, **self._options)

    def __call__(self, batch: Batch) -> Batch:
        if self._encode is None:  # positional format waiting for the source's schema
            self._schema = batch.schema
            self._build()
        encode = self._encode
        assert encode is not None
        values = batch.values
        if values and _is_record(values[0]):
            batch.map_values(_as_dict_encoder(encode), self.stage, self.name)
        else:
            try:  # the hot path: one call over the column, or one comprehension
                column = self._column
                batch.values = column(values) if column is not None and values and type(values[0]) is dict \
                    else [encode(v) for v in values]
            except Exception:  # redo record by record: each misfit rejected with its field path
                batch.values = values
                batch.map_values(self._explained, self.stage, self.name)
        batch.headers = {"Content-Type": self._content_type}
        return batch

    def _explained(self, value: Any) -> bytes:
        try:
            return self._encode(value)  # type: ignore[misc]
        except Exception as exc:
            schema = self._schema if isinstance(self._schema, RecordSchema) else None
            raise StageError("serialize", self.name, explain(schema, value, exc)) from None


class Deserialize(Operator):
    """Decode every payload with one format, or by ``Content-Type`` with ``format: auto``."""

    stage = "deserialize"

    def __init__(self, format: str = "auto", schema: SchemaSpec = None, *, allow_pickle: bool = False,
                 typed: bool | None = None, framed: bool = False, schema_id: int | None = None) -> None:
        self.auto = format == "auto"
        self.allow_pickle = allow_pickle
        self.name = format if self.auto else get_format(format).name
        self.params = {"format": self.name} | ({"schema": _schema_param(schema)} if schema else {})
        self.params |= {k: v for k, v in (("framed", framed), ("schema_id", schema_id)) if v}
        self._options: dict[str, Any] = {"framed": framed, "schema_id": schema_id}
        self._column: Callable[[list[bytes]], list[Any]] | None = None
        self._schema: Schema = resolve_schema(schema)
        record_class = _record_class(schema)
        # A record class in the schema gives typed records unless typed: false says otherwise.
        self._record_class = record_class if (typed is None or typed) else None
        if typed and record_class is None:
            raise ValueError("typed: true needs schema: module:RecordClass")
        self._fixed: Decoder | None = None
        if not self.auto:
            fmt = get_format(format)
            if not fmt.needs_schema or self._schema is not None:
                self._build(fmt)
        self._by_type: dict[str | None, Decoder] = {}

    def _build(self, fmt: Any) -> None:
        self._fixed = self._typed(fmt.decoder(self._schema, allow_pickle=self.allow_pickle, **self._options))
        if self._record_class is None:
            self._column = fmt.column_decoder(self._schema, **self._options)

    def _typed(self, decode: Decoder) -> Decoder:
        cls = self._record_class
        if cls is None:
            return decode
        build = _builder(cls)
        return lambda data: build(decode(data))

    def _for_type(self, content_type: str | None) -> Decoder:
        fn = self._by_type.get(content_type)
        if fn is None:
            try:
                fmt = format_for_content_type(content_type)
                fn = self._typed(fmt.decoder(self._schema, allow_pickle=self.allow_pickle, **self._options))
            except (KeyError, ValueError, RefusedError) as exc:
                fn = failing(exc if isinstance(exc, StageError) else
                              StageError("deserialize", "auto", str(exc.args[0]) if exc.args else str(exc)))
            self._by_type[content_type] = fn
        return fn

    def __call__(self, batch: Batch) -> Batch:
        if self._fixed is None and not self.auto:  # positional format waiting for the source's schema
            self._schema = self._schema or batch.schema
            self._build(get_format(self.name))
        fn = self._fixed
        if fn is not None:
            column = self._column
            if column is not None and batch.values:
                values = batch.values
                try:  # a batch of fixed-size records at once
                    batch.values = column(values)
                    return batch
                except Exception:  # redo record by record: each bad payload rejected with its reason
                    batch.values = values
            batch.map_values(fn, self.stage, self.name)
            return batch
        headers = batch.headers
        if headers is None or isinstance(headers, dict):
            batch.map_values(self._for_type(headers.get("Content-Type") if headers else None), self.stage, "auto")
            return batch
        pick = self._for_type
        batch.map_values(lambda v, h: pick(h.get("Content-Type") if h else None)(v),
                         self.stage, "auto", with_column=headers)
        return batch


def _builder(cls: type) -> Callable[[Any], Any]:
    """dict -> instance of ``cls``: ``from_data`` where the class has it, else ``cls(**d)``."""
    from_data = getattr(cls, "from_data", None)
    if from_data is None:
        return lambda d: cls(**d)
    if getattr(cls, "__is_model__", False):
        # faust.Record: without preferred_type a "__faust" key in the payload picks the
        # class (another one, or a KeyError when that one is not imported here).
        return functools.partial(from_data, preferred_type=cls)
    return from_data


def _schema_param(schema: SchemaSpec) -> Any:
    if isinstance(schema, type):
        return f"{schema.__module__}:{schema.__qualname__}"
    if isinstance(schema, RecordSchema):
        return schema.to_document()
    if isinstance(schema, Mapping):
        return dict(schema)
    return schema if isinstance(schema, str) else list(schema or ())


def _is_record(value: Any) -> bool:
    """True for typed records (dataclasses, faust.Record, pydantic) that encode as their dict."""
    return hasattr(value, "asdict") or hasattr(value, "model_dump") or hasattr(value, "__dataclass_fields__")


def _as_dict_encoder(encode: Encoder) -> Callable[[Any], bytes]:
    import dataclasses

    def to_dict(value: Any) -> Any:
        if hasattr(value, "to_representation"):
            # faust.Record: the dict Faust itself encodes (with "__faust" unless the class
            # says include_metadata=False), so both sides write the same bytes.
            return value.to_representation()
        if hasattr(value, "asdict"):
            return value.asdict()
        if hasattr(value, "model_dump"):
            return value.model_dump()
        return dataclasses.asdict(value)

    return lambda value: encode(to_dict(value))


# --- config: ``- serialize: {...}`` and ``- deserialize: {...}`` -----------------------------------

SchemaParam = str | list[str] | dict[str, Any] | None  # YAML's spellings of a SchemaSpec (see resolve_schema)


def _known_format(extra: tuple[str, ...] = ()) -> Callable[[str], str]:
    def check(v: str) -> str:
        from ..codecs.formats import FORMATS

        if v not in FORMATS and v not in extra:
            raise ValueError(f"unknown format {v!r}: allowed {', '.join([*FORMATS, *extra])}")
        return v

    return check


def _with_message(schema: SchemaSpec, message: str | None) -> SchemaSpec:
    """``schema: x.proto`` and ``message: Point`` as the one spelling ``x.proto#Point``."""
    if message is None:
        return schema
    suffixes = (".proto", *_DESCRIPTOR_SETS)
    if not isinstance(schema, str) or Path(schema.partition("#")[0]).suffix.lower() not in suffixes:
        raise SchemaError("", f"message: {message!r} names a message of a protobuf schema file; schema: must then be "
                              f"a {', '.join(suffixes)} file, got {_schema_param(schema)!r}")
    if "#" in schema:
        raise SchemaError("", f"message: {message!r} and {schema!r} both name the message: give one of them")
    return f"{schema}#{message}"


_MESSAGE = Field(default=None, description="protobuf: the message of a .proto/.desc schema that declares several")


class SerializeParams(Strict):
    format: str
    schema_: SchemaParam = Field(default=None, alias="schema")
    message: str | None = _MESSAGE
    schema_id: int | None = Field(default=None, ge=0, lt=2**32, description="avro: Confluent framing")

    _format = field_validator("format")(_known_format())

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Serialize(self.format, schema=_with_message(self.schema_, self.message), schema_id=self.schema_id)]


class DeserializeParams(Strict):
    format: str = "auto"
    schema_: SchemaParam = Field(default=None, alias="schema")
    message: str | None = _MESSAGE
    typed: bool | None = None
    framed: bool = Field(default=False, description="a message is a list of records (pack before serialize)")
    schema_id: int | None = Field(default=None, ge=0, lt=2**32, description="avro: Confluent framing")

    _format = field_validator("format")(_known_format(("auto",)))

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Deserialize(self.format, schema=_with_message(self.schema_, self.message),
                            allow_pickle=ctx.allow_pickle, typed=self.typed, framed=self.framed,
                            schema_id=self.schema_id)]


RANK = 10  # where these come in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"serialize": SerializeParams, "deserialize": DeserializeParams}
