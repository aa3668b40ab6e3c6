"""One typed schema for records: every schema'd format (protobuf, avro, bincode, postcard,
msgspec-typed msgpack and json) is built from it.

The language is small on purpose, so that every format can represent it and a Rust or JS
peer can read it. A schema is a mapping of field name to type, written in YAML or JSON::

    name: Point            # optional (default: Record); the document form also takes `fields:`
    fields:
      x: int32
      y: int32

or inline, as the fields alone: ``{x: int32, y: int32}``. Types:

===================  ==============================================================
``int32`` ``int64``  signed integers
``uint32``           unsigned 32-bit integer
``float32`` ``float64``
``bool`` ``string``  string is UTF-8 text
``bytes``            a byte string of any length
``bytes[N]``         exactly N bytes (ids, keys, signatures)
``list<T>``          a list of T (T any type spelled as a string); ``[T]`` (a one-item
                     YAML list) also means list of T, and T may then be a nested record
``{...}``            a nested record (a mapping of its own fields)
``T?``               optional: the value may be null (``None``)
``name?: T``         a field name ending in ``?`` makes the field optional (any T,
                     nested records included)
===================  ==============================================================

Field order is the declaration order: positional formats (msgpack-array, bincode, postcard,
protobuf field numbers 1..n, avro) follow it. Decoded records always carry every declared
field; an optional field that was absent reads as ``None``.

A ``RecordSchema`` is also a sequence of its field names, so it can stand wherever a list of
field names is expected (the positional ``msgpack-array`` and ``Batch.schema``).

A schema's identity on the wire is ``schema_fingerprint``: the first 16 hex digits of the SHA-256 of its
``canonical_form`` (its fields in order, names and types, nothing else), which ``serialize`` stamps on every
message as ``Wirepipe-Schema`` (docs/concepts/wire-contract.md has the rules a peer in another language follows).

The package holds one concept per module, each re-exported here (``from wirepipe.schema import X``):
``language`` (the kinds, ``SchemaError``), ``types`` (``Type``, ``Field``, ``RecordSchema`` and their
spellings), ``parsing`` (YAML, JSON, files), ``inference`` (from Arrow and from records), ``checks`` (why a
value does not fit), ``extra_fields`` and ``projection`` (fields a schema does not declare: found, dropped),
``fingerprint`` (the canonical form and the ``Wirepipe-Schema`` fingerprint) and ``evolution`` (two schemas
compared, records of one read as the other by field name; ``wirepipe.schema.evolution``, not re-exported).
"""

from .checks import check_value, explain, undeclared
from .extra_fields import ENVELOPE_KEYS, undeclared_column_test, undeclared_test
from .fingerprint import FINGERPRINT_DIGITS, canonical_form, schema_fingerprint
from .inference import from_arrow, infer_schema
from .language import ALLOWED, FLOATS, INTS, PRIMITIVES, Kind, SchemaError
from .parsing import load_schema_file, parse_schema, parse_type
from .projection import projection, with_defaults
from .types import Field, RecordSchema, Type

__all__ = [
    "ALLOWED",
    "ENVELOPE_KEYS",
    "FINGERPRINT_DIGITS",
    "FLOATS",
    "INTS",
    "PRIMITIVES",
    "Field",
    "Kind",
    "RecordSchema",
    "SchemaError",
    "Type",
    "canonical_form",
    "check_value",
    "explain",
    "from_arrow",
    "infer_schema",
    "load_schema_file",
    "parse_schema",
    "parse_type",
    "projection",
    "schema_fingerprint",
    "undeclared",
    "undeclared_column_test",
    "undeclared_test",
    "with_defaults",
]
