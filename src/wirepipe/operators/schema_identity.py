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
  by name (``schema.evolution.reader_of``) when the two schemas are compatible; else the record is
  dead-lettered with a reason naming both schemas and what differs, or that the fingerprint is none it knows.

With a schema registry (``schema: registry/points``), the writers are those the registry holds: ``unknown``
lists a batch's fingerprints not known yet, the operator asks its store for them before the pass and ``learn``
keeps each one found (an unknown one is dead-lettered with the store's answer, asked again later). With
``schema: registry`` alone there is no reader's schema: each record is decoded with its writer's, as it was
written.

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
from typing import Any

from ..codecs.formats import Decoder, Format, Schema
from ..core.batch import header_values
from ..core.errors import StageError
from ..schema import RecordSchema, schema_fingerprint
from ..schema.evolution import compare_schemas, reader_of
from ..wire import Header
from .operator import failing

REQUIRED = "required"
_UNUSABLE_KEPT = 1024  # fingerprints remembered with why the registry gave no schema


class SchemaIdentity:
    """What a reader's schema makes of the ``Wirepipe-Schema`` header: whether a batch decodes as it always
    did, and the decoder of a record written with another schema."""

    def __init__(self, reader: Schema, writers: Sequence[Schema] = (), *, required: bool = False,
                 registry: str | None = None, reader_label: str | None = None) -> None:
        self.reader = reader  # None: each record is read as its writer's schema (schema: registry)
        self.own = schema_fingerprint(reader) if reader is not None else None
        self.writers = {schema_fingerprint(w): w for w in writers if w is not None}
        self.required = required
        self.registry = registry  # where writers are looked up (its messages name it), None: writer_schemas only
        self.reader_label = reader_label  # how messages call the reader's schema (points@2), besides its fields
        self.unusable: dict[str, str] = {}  # fingerprint -> why the registry cannot give its schema

    def unknown(self, headers: Any) -> set[str]:
        """The fingerprints a batch's records carry that are neither the reader's nor a writer's known yet."""
        seen = header_values(headers, Header.SCHEMA)
        return {fp for fp in seen if fp is not None and fp != self.own and fp not in self.writers}

    def learn(self, fingerprint: str, schema: Schema | None, why: str | None = None) -> None:
        """What the registry answered for ``fingerprint``: its schema, or None and why there is none."""
        if schema is not None:
            self.writers[fingerprint] = schema
            self.unusable.pop(fingerprint, None)
        else:
            if len(self.unusable) >= _UNUSABLE_KEPT:  # the header is the publisher's: made-up values must not grow it
                del self.unusable[next(iter(self.unusable))]
            self.unusable[fingerprint] = why or f"the schema registry {self.registry} does not hold it"

    def all_own(self, headers: Any, names_on_wire: bool = False) -> bool:
        """Whether every record with these headers (a batch's: None, one dict, or one per record) decodes with
        the reader's own decoder: written with its schema, or unstamped and allowed (any stamp, when the format
        names its fields on the wire)."""
        if headers is None:
            return not self.required
        return all(self._own(fp, names_on_wire) for fp in header_values(headers, Header.SCHEMA))

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
                                 f"schema_header: required refuses it (this deserialize reads {self._reads(True)})")
        if fingerprint == self.own or not fmt.needs_schema:
            return own  # its own schema, or a format that names its fields on the wire: read by name as it is
        writer = self.writers.get(fingerprint)
        if writer is None and self.registry is not None:
            why = self.unusable.get(fingerprint, "it was not looked up before the pass (the run loop asks the "
                                                 "registry before the operators run)")
            return self._refused(f"written with schema {fingerprint}, which this deserialize cannot read: {why} "
                                 "(wirepipe schema push registers a schema)")
        if writer is None:
            return self._refused(
                f"written with schema {fingerprint}, which this deserialize does not know: it reads "
                f"{_shown(self.reader)} ({self.own}), and {fmt.name} read with another schema than the one it was "
                "written with puts values under other field names; list the publisher schema in writer_schemas: to "
                "read its records by field name (wirepipe schema diff says what differs)")
        if self.reader is None:  # schema: registry alone: read as written
            convert: Callable[[Any], Any] = _as_written
        else:
            diff = compare_schemas(writer, self.reader)
            if not diff.readable:
                return self._refused(
                    f"written with schema {fingerprint} ({_shown(writer)}), read here as {self._reads()}, and its "
                    f"records cannot be read by field name: {'; '.join(diff.problems)}")
            convert = reader_of(writer, self.reader)
        try:
            return build(writer, convert)
        except (ValueError, KeyError) as exc:  # a writer's schema the format cannot take (field names for avro)
            return self._refused(f"written with schema {fingerprint} ({_shown(writer)}): {fmt.name} cannot "
                                 f"decode with it ({exc})")

    def _refused(self, reason: str) -> Decoder:
        return failing(StageError("deserialize", "schema", reason))

    def _reads(self, fields_first: bool = False) -> str:
        """The reader's schema as messages name it: its fingerprint and fields (and its registered name)."""
        if self.reader is None:
            return f"each record with the schema it was written with, from {self.registry}"
        label = f"{self.reader_label} " if self.reader_label else ""
        if fields_first:
            return f"{label}{_shown(self.reader)}, {self.own}"
        return f"{label}{self.own} ({_shown(self.reader)})"


def _as_written(record: Any) -> Any:
    return record


def _shown(schema: Schema) -> str:
    return str(schema) if isinstance(schema, RecordSchema) else f"[{', '.join(schema or ())}]"
