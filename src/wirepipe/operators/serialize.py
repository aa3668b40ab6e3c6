"""The serialize operator: records to payload bytes with one format.

``Serialize`` turns the value column into payload bytes with one format and sets
``Content-Type`` (``Header.CONTENT_TYPE``), so a consumer with ``format: auto`` decodes it;
the other headers records came with (a trace id from a NATS source) stay, except a
``Content-Encoding``: the bytes are new and not compressed (``compress`` sets its own);
``deserialize`` (``operators/deserialize.py``) is the reverse. The ``schema`` option is
described in ``operators/schema_options.py``. A value that does not fit a typed schema is
rejected per record with the field path in the reason.

In YAML ``- serialize: {format: msgpack}``; in Python ``wirepipe.serialize("msgpack")``:

>>> from wirepipe.core.batch import Batch
>>> from wirepipe.operators.deserialize import Deserialize
>>> payloads = Serialize("json")(Batch([{"x": 1}, {"x": 2}]))
>>> payloads.values, payloads.headers
([b'{"x":1}', b'{"x":2}'], {'Content-Type': 'application/json'})
>>> Deserialize("auto")(payloads).values
[{'x': 1}, {'x': 2}]
>>> Serialize("json")(Batch([{"x": 1}], headers=[{"traceparent": "00-1", "Content-Encoding": "gzip"}])).headers
[{'traceparent': '00-1', 'Content-Type': 'application/json'}]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field, field_validator

from ..codecs.formats import Encoder, Schema, get_format
from ..core.batch import Batch
from ..core.errors import StageError
from ..core.models import Strict
from ..schema import RecordSchema, explain
from ..wire import Header, set_header
from .base import BuildContext, Operator
from .schema_options import (
    MESSAGE_FIELD,
    SchemaParam,
    SchemaSpec,
    known_format,
    resolve_schema,
    schema_param,
    with_message,
)


class Serialize(Operator):
    """Encode every value with one format; sets ``Content-Type``."""

    stage = "serialize"
    adds_headers = (Header.CONTENT_TYPE.value,)

    def __init__(self, format: str = "msgpack", schema: SchemaSpec = None, *, schema_id: int | None = None) -> None:
        self.format = get_format(format)
        self.name = self.format.name
        self.params = {"format": self.name} | ({"schema": schema_param(schema)} if schema else {})
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
        set_header(batch, Header.CONTENT_TYPE.value, self._content_type, drop=Header.CONTENT_ENCODING.value)
        return batch

    def _explained(self, value: Any) -> bytes:
        try:
            return self._encode(value)  # type: ignore[misc]
        except Exception as exc:
            schema = self._schema if isinstance(self._schema, RecordSchema) else None
            raise StageError("serialize", self.name, explain(schema, value, exc)) from None


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


# --- config: ``- serialize: {...}`` ---------------------------------------------------------------


class SerializeParams(Strict):
    format: str
    schema_: SchemaParam = Field(default=None, alias="schema")
    message: str | None = MESSAGE_FIELD
    schema_id: int | None = Field(default=None, ge=0, lt=2**32, description="avro: Confluent framing")

    _format = field_validator("format")(known_format())

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Serialize(self.format, schema=with_message(self.schema_, self.message), schema_id=self.schema_id)]


RANK = 10  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"serialize": SerializeParams}


def __getattr__(name: str) -> Any:
    """Names that lived here before each operator had its own module (code written against them)."""
    if name in ("Deserialize", "DeserializeParams"):
        from . import deserialize

        return getattr(deserialize, name)
    if name in ("resolve_schema", "SchemaSpec", "SchemaParam"):
        from . import schema_options

        return getattr(schema_options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
