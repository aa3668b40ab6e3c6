"""The serialize operator: records to payload bytes with one format.

``Serialize`` turns the value column into payload bytes with one format and sets
``Content-Type`` (``Header.CONTENT_TYPE``), so a consumer with ``format: auto`` decodes it, and, given a
schema (its own or the one its source attaches), ``Wirepipe-Schema`` (``Header.SCHEMA``): the schema's
fingerprint, which a consumer compares with its own (``operators/schema_identity.py``). The other headers
records came with (a trace id from a NATS source) stay, except those that described the old bytes:
``Content-Encoding`` and ``Wirepipe-Dictionary`` (the bytes are new and not compressed: ``compress`` sets its
own) and, without a schema, ``Wirepipe-Schema``;
``deserialize`` (``operators/deserialize.py``) is the reverse. The ``schema`` option is
described in ``operators/schema_options.py``. A value that does not fit a typed schema is
rejected per record with the field path in the reason, and so is a record with a field the
schema does not declare (the format would leave it out): ``extra_fields: drop`` asks for that
projection instead, and the records that lost fields are counted (``Batch.projected``: the run's
``projected`` figure). Formats that take no schema (``arrow``, ``toml`` ...) given a typed one
have each record checked against it (``codecs/checks.py``'s ``validator``) before they write it.

A registered schema (``schema: registry/points@3``, ``nats://BUCKET/points@3``; without ``@``, the latest version
when the pipeline starts) is fetched from the store the pipeline hands the operator (``core/stores.py``) when the
pipeline starts: a name or a version the registry does not hold stops it there, saying what it holds, so a
publisher only ever writes with a registered version.

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
>>> Serialize("bincode", schema={"x": "int32"})(Batch([{"x": 1}])).headers
{'Content-Type': 'application/vnd.wirepipe.bincode', 'Wirepipe-Schema': '925ba1e389ec7e0a'}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from operator import is_not
from typing import Any, Literal

from pydantic import Field, field_validator

from ..codecs.formats import Encoder, Schema, get_format
from ..core.batch import Batch
from ..core.errors import Refusal, StageError, WirepipeError
from ..core.models import Strict
from ..core.records import as_dict, is_typed_record
from ..core.stages import Stage
from ..core.stores import RegistryRef, SchemaFromStore, registered_schema, registry_ref
from ..schema import RecordSchema, explain, projection, schema_fingerprint, undeclared_column_test
from ..wire import Header, set_headers
from .operator import PAYLOADS, BuildContext, Configured, Operator, given
from .schema_options import (
    MESSAGE_FIELD,
    SCHEMA_FIELD,
    SchemaParam,
    SchemaSpec,
    known_format,
    resolve_schema,
    schema_param,
    source_schema_refusal,
    with_message,
)

log = logging.getLogger("wirepipe.schemas")


class Serialize(SchemaFromStore, Configured, Operator):
    """Encode every value with one format; sets ``Content-Type``."""

    stage = Stage.SERIALIZE
    entry = "serialize"
    adds_headers = (Header.CONTENT_TYPE, Header.SCHEMA)
    gives = PAYLOADS

    def __init__(self, format: str = "msgpack", schema: SchemaSpec = None, *, schema_id: int | None = None,
                 extra_fields: str = "reject") -> None:
        """The arguments are ``SerializeParams``'s fields, checked as the YAML entry is."""
        self._init(SerializeParams, format=format, extra_fields=extra_fields,
                   **given(schema=schema, schema_id=schema_id))

    def _configure(self, params: SerializeParams, ctx: BuildContext) -> None:
        schema = with_message(params.schema_, params.message)
        schema_id, extra_fields = params.schema_id, params.extra_fields
        self.format = get_format(params.format)
        self.name = self.format.name
        self.params = {"format": self.name} | ({"schema": schema_param(schema)} if schema else {})
        if schema_id is not None:
            self.params["schema_id"] = schema_id
        if extra_fields == "drop":
            if schema is None and not self.format.needs_schema:
                raise ValueError(f"extra_fields: drop keeps the fields a schema declares, and {self.name} is given "
                                 "none: set `schema:` too")
            self.params["extra_fields"] = extra_fields
        self._drop = extra_fields == "drop"
        self._options = {"schema_id": schema_id}
        self._ref: RegistryRef | None = registry_ref(schema)
        self._store = None
        if self._ref is not None and self._ref.name is None:
            raise ValueError(f"schema: {self._ref}: a publisher writes with one registered version: name it, "
                             f"{self._ref}/NAME (the latest when the pipeline starts), with @VERSION after it for another")
        self.io = self._ref is not None
        self._schema: Schema = resolve_schema(schema) if self._ref is None else None
        self._encode: Encoder | None = None
        self._column: Callable[[list[Any]], list[bytes]] | None = None
        self._project: Callable[[Any], Any] | None = None
        self._all_fit: Callable[[list[Any]], bool] | None = None
        self._headers: dict[str, str] = {Header.CONTENT_TYPE: self.format.content_type}
        if self._ready():
            self._build()

    def _ready(self) -> bool:
        return self._ref is None and (not self.format.needs_schema or self._schema is not None)

    def refuse_schema(self, schema: Any) -> Refusal | None:
        """A positional format given no ``schema:`` takes the one its source attaches: refused when the pipeline
        is built (not at its first batch) when the source attaches none, or one without the types it needs."""
        if self._ready() or self._ref is not None:
            return None
        return source_schema_refusal(self.format, schema, self._options)

    async def open(self, parts: Sequence[Any]) -> None:
        """The registered version ``schema:`` names, fetched once: what every record of the run is written with."""
        if self._ref is None:
            return
        store = self._handed("serialize")
        registered = await registered_schema(store, self._ref, "serialize")
        self._schema = registered.schema
        self._build()
        log.info("serialize: writing with %s (%s) from %s", registered, registered.fingerprint, store.where)

    def _build(self) -> None:
        schema = self._schema
        if schema:
            self._headers[Header.SCHEMA] = schema_fingerprint(schema)
        self._stale = (Header.CONTENT_ENCODING, Header.DICTIONARY) + (() if schema else (Header.SCHEMA,))
        self._encode = self.format.encoder(schema, **self._options)
        self._column = self.format.column_encoder(schema, **self._options)
        if isinstance(schema, RecordSchema) and not self.format.checks_schema:
            # a format that takes no schema: each record is checked against it before it is written
            from ..codecs.checks import checked, validator

            self._encode = checked(validator(schema), self._encode)
            self._column = None
        if self._drop and schema:
            self._all_fit = undeclared_column_test(schema)
            self._project = projection(schema)

    def __call__(self, batch: Batch) -> Batch:
        if self._encode is None:  # positional format waiting for the source's schema
            if self._ref is not None:
                raise WirepipeError(f"serialize: schema {self._ref} comes from a schema registry when the pipeline "
                                    "starts: run the operator in a Pipeline (or await its open() first)")
            self._schema = batch.schema
            self._build()
        encode = self._encode
        assert encode is not None
        values = batch.values
        if self._project is not None and values and not _all_fit(self._all_fit, values):
            projected = [self._project(v) for v in values]
            batch.projected += sum(map(is_not, projected, values))
            batch.values = values = projected
        if values and is_typed_record(values[0]):
            batch.map_values(lambda value: encode(as_dict(value)), self.stage, self.name)
        else:
            try:  # the hot path: one call over the column, or one comprehension
                column = self._column
                batch.values = column(values) if column is not None and values and type(values[0]) in _COLUMNS \
                    else [encode(v) for v in values]
            except Exception:  # redo record by record: each misfit rejected with its field path
                batch.values = values
                batch.map_values(self._explained, self.stage, self.name)
        set_headers(batch, self._headers, drop=self._stale)
        return batch

    def _explained(self, value: Any) -> bytes:
        try:
            return self._encode(value)  # type: ignore[misc]
        except Exception as exc:
            schema = self._schema if isinstance(self._schema, RecordSchema) else None
            raise StageError("serialize", self.name, explain(schema, value, exc)) from None


# what a format's column encoder takes: records, or framed messages (``pack``'s lists of records)
_COLUMNS = (dict, list)


def _all_fit(test: Any, values: list[Any]) -> bool:
    try:
        return bool(test(values))
    except Exception:  # a column it cannot tell about (framed lists, misfits): the projection looks at each value
        return False


# --- config: ``- serialize: {...}`` ---------------------------------------------------------------


class SerializeParams(Strict):
    format: str = Field(description="the format every record is encoded with (sets Content-Type)")
    schema_: SchemaParam = SCHEMA_FIELD
    message: str | None = MESSAGE_FIELD
    schema_id: int | None = Field(default=None, ge=0, lt=2**32, description="avro: Confluent framing")
    extra_fields: Literal["reject", "drop"] = Field(
        default="reject", description="a record with a field the schema does not declare: rejected (dead-lettered), "
                                      "or the field dropped and the record counted as projected")

    _format = field_validator("format")(known_format())

    def build(self, ctx: BuildContext) -> list[Operator]:
        return [Serialize.from_params(self, ctx)]


RANK = 10  # where it comes in "allowed operators" lists (see operators/__init__.py)
OPERATORS = {"serialize": SerializeParams}
