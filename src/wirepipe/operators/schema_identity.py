"""The ``Wirepipe-Schema`` header on decode: which decoder a record gets, by the schema it was written with.

``serialize`` given a schema stamps every message with the schema's fingerprint (``schema.schema_fingerprint``).
``deserialize`` given a schema (the reader's) compares each record's with its own, once per distinct value in a
batch (one dict lookup a record), and:

- its own (the common case): the batch is decoded as it always was, the whole column at once;
- none (a publisher that does not stamp: another client, an older wirepipe): decoded with the reader's schema,
  as before; with ``schema_header: required``, dead-lettered with that reason;
- another, in a format that names its fields on the wire (msgpack, json, bson ...): decoded with the reader's
  schema as before, which reads by name;
- another, in a positional format (msgpack-array, avro, bincode, bincode-varint, postcard, protobuf, whose field
  numbers follow the order): never decoded with the reader's schema, which would put values under other
  fields' names. A schema of ``writer_schemas`` with that fingerprint decodes it, and its fields are then read
  by name (``schema_evolution.reader_of``) when the two schemas are compatible; else the record is
  dead-lettered with a reason naming both schemas and what differs, or that the fingerprint is none it knows.

>>> from wirepipe.core.batch import Batch
>>> from wirepipe.operators.deserialize import Deserialize
>>> from wirepipe.operators.serialize import Serialize
>>> sent = Serialize("bincode", schema={"a": "int64", "b": "int64"})(Batch([{"a": 1, "b": 2}]))
>>> Deserialize("bincode", schema={"b": "int64", "a": "int64"})(sent).rejected[0].error  # doctest: +ELLIPSIS
'written with schema 59fc81b9aa9d0fde, which this deserialize does not know: ...'
>>> sent = Serialize("bincode", schema={"a": "int64", "b": "int64"})(Batch([{"a": 1, "b": 2}]))
>>> Deserialize("bincode", schema={"b": "int64", "a": "int64"}, writer_schemas=[{"a": "int64", "b": "int64"}])(
...     sent).values
[{'b': 2, 'a': 1}]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from ..codecs.formats import Decoder, Format, Schema
from ..core.errors import StageError
from ..schema import RecordSchema, schema_fingerprint
from ..schema_evolution import compare_schemas, reader_of
from ..wire import Header
from .operator import failing

REQUIRED = "required"


class SchemaIdentity:
    """What a reader's schema makes of the ``Wirepipe-Schema`` header: whether a batch decodes as it always
    did, and the decoder of a record written with another schema."""

    def __init__(self, reader: Schema, writers: Sequence[Schema] = (), *, required: bool = False) -> None:
        assert reader is not None
        self.reader = reader
        self.own = schema_fingerprint(reader)
        self.writers = {schema_fingerprint(w): w for w in writers if w is not None}
        self.required = required

    def all_own(self, headers: Any, names_on_wire: bool = False) -> bool:
        """Whether every record with these headers (a batch's: None, one dict, or one per record) decodes with
        the reader's own decoder: written with its schema, or unstamped and allowed (any stamp, when the format
        names its fields on the wire)."""
        key = Header.SCHEMA
        if headers is None:
            return not self.required
        if isinstance(headers, dict):
            return self._own(headers.get(key), names_on_wire)
        try:  # one dict lookup a record, in C (half the time of a comprehension)
            seen = set(map(dict.get, headers, repeat(key)))
        except TypeError:  # a record without headers (None)
            seen = {h.get(key) if h else None for h in headers}
        return all(self._own(fp, names_on_wire) for fp in seen)

    def _own(self, fingerprint: str | None, names_on_wire: bool) -> bool:
        if fingerprint is None:
            return not self.required
        return names_on_wire or fingerprint == self.own

    def decoder(self, fmt: Format, fingerprint: str | None, own: Decoder,
                build: Callable[[Schema, Callable[[Any], Any]], Decoder]) -> Decoder:
        """The decoder of a record of ``fmt`` written with the schema ``fingerprint`` names (None: no header):
        ``own`` (the reader's) where that is right, else ``build(writer, convert)``: the writer's decoder, its
        records then read by field name as the reader's (``convert``); else one that dead-letters the record
        with the reason."""
        if fingerprint is None:
            if not self.required:
                return own
            return self._refused(f"no {Header.SCHEMA} header (a publisher that does not stamp its schema), and "
                                 f"schema_header: required refuses it (this deserialize reads "
                                 f"{_shown(self.reader)}, {self.own})")
        if fingerprint == self.own or not fmt.needs_schema:
            return own  # its own schema, or a format that names its fields on the wire: read by name as it is
        writer = self.writers.get(fingerprint)
        if writer is None:
            return self._refused(
                f"written with schema {fingerprint}, which this deserialize does not know: it reads "
                f"{_shown(self.reader)} ({self.own}), and {fmt.name} read with another schema than the one it was "
                "written with puts values under other field names; list the publisher schema in writer_schemas: to "
                "read its records by field name (wirepipe schema diff says what differs)")
        diff = compare_schemas(writer, self.reader)
        if not diff.readable:
            return self._refused(
                f"written with schema {fingerprint} ({_shown(writer)}), read here as {self.own} "
                f"({_shown(self.reader)}), and its records cannot be read by field name: {'; '.join(diff.problems)}")
        try:
            return build(writer, reader_of(writer, self.reader))
        except (ValueError, KeyError) as exc:  # a writer's schema the format cannot take (field names for avro)
            return self._refused(f"written with schema {fingerprint} ({_shown(writer)}): {fmt.name} cannot "
                                 f"decode with it ({exc})")

    def _refused(self, reason: str) -> Decoder:
        return failing(StageError("deserialize", "schema", reason))


def _shown(schema: Schema) -> str:
    return str(schema) if isinstance(schema, RecordSchema) else f"[{', '.join(schema or ())}]"
