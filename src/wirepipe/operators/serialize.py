"""The serialize and deserialize operators.

``Serialize`` turns the value column into payload bytes with one format and sets
``Content-Type``; ``Deserialize`` does the reverse, by a fixed format or, with
``format: auto``, by each record's ``Content-Type``. Positional formats take their
field order from ``schema`` (a dataset name, a list of fields, or ``module:Class``),
or from the schema the source attached to the batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..batch import Batch
from ..codecs.formats import Decoder, Encoder, format_for_content_type, get_format
from ..errors import RefusedError, StageError
from .base import Operator, failing

SchemaSpec = str | Sequence[str] | type | None


def resolve_schema(spec: SchemaSpec) -> tuple[str, ...] | None:
    """Field order from a dataset name, a list of names, a ``module:Class`` path or a class."""
    if spec is None:
        return None
    if isinstance(spec, str):
        if ":" in spec:
            return _fields_of(import_path(spec))
        from ..datasets import get_dataset

        return get_dataset(spec).fields
    if isinstance(spec, type):
        return _fields_of(spec)
    return tuple(spec)


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
    if isinstance(spec, str) and ":" in spec:
        return import_path(spec)
    return spec if isinstance(spec, type) else None


class Serialize(Operator):
    """Encode every value with one format; sets ``Content-Type``."""

    stage = "serialize"

    def __init__(self, format: str = "msgpack", schema: SchemaSpec = None) -> None:
        self.format = get_format(format)
        self.name = self.format.name
        self.params = {"format": self.name} | ({"schema": _schema_param(schema)} if schema else {})
        self._schema = resolve_schema(schema)
        self._encode: Encoder | None = self.format.encoder(self._schema) if self._ready() else None
        self._content_type = self.format.content_type

    def _ready(self) -> bool:
        return not self.format.needs_schema or self._schema is not None

    def __call__(self, batch: Batch) -> Batch:
        encode = self._encode
        if encode is None:  # positional format waiting for the source's schema
            self._schema = batch.schema
            encode = self._encode = self.format.encoder(self._schema)
        batch.map_values(_as_dict_encoder(encode) if batch.values and _is_record(batch.values[0]) else encode,
                         self.stage, self.name)
        batch.headers = {"Content-Type": self._content_type}
        return batch


class Deserialize(Operator):
    """Decode every payload with one format, or by ``Content-Type`` with ``format: auto``."""

    stage = "deserialize"

    def __init__(self, format: str = "auto", schema: SchemaSpec = None, *, allow_pickle: bool = False,
                 typed: bool | None = None) -> None:
        self.auto = format == "auto"
        self.allow_pickle = allow_pickle
        self.name = format if self.auto else get_format(format).name
        self.params = {"format": self.name} | ({"schema": _schema_param(schema)} if schema else {})
        self._schema = resolve_schema(schema)
        record_class = _record_class(schema)
        # A record class in the schema gives typed records unless typed: false says otherwise.
        self._record_class = record_class if (typed is None or typed) else None
        if typed and record_class is None:
            raise ValueError("typed: true needs schema: module:RecordClass")
        self._fixed: Decoder | None = None
        if not self.auto:
            fmt = get_format(format)
            if not fmt.needs_schema or self._schema is not None:
                self._fixed = self._typed(fmt.decoder(self._schema, allow_pickle=allow_pickle))
        self._by_type: dict[str | None, Decoder] = {}

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
                fn = self._typed(fmt.decoder(self._schema, allow_pickle=self.allow_pickle))
            except (KeyError, ValueError, RefusedError) as exc:
                fn = failing(exc if isinstance(exc, StageError) else
                              StageError("deserialize", "auto", str(exc.args[0]) if exc.args else str(exc)))
            self._by_type[content_type] = fn
        return fn

    def __call__(self, batch: Batch) -> Batch:
        fn = self._fixed
        if fn is None and not self.auto:  # positional format waiting for the source's schema
            self._schema = self._schema or batch.schema
            fn = self._fixed = self._typed(get_format(self.name).decoder(self._schema, allow_pickle=self.allow_pickle))
        if fn is not None:
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
