"""A schema's identity on the wire: its canonical form and the fingerprint of it (the ``Wirepipe-Schema``
header; docs/concepts/wire-contract.md has the rules a peer in another language follows).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from .language import Kind
from .types import RecordSchema, Type

FINGERPRINT_DIGITS = 16  # hex digits of the SHA-256 kept: 64 bits, the width of Avro's single-object fingerprint


def canonical_form(schema: RecordSchema | Sequence[str]) -> str:
    """The one text of a schema that its fingerprint is taken of: what the bytes of every format depend on,
    spelled one way. Fields in declaration order (the positional formats follow it, so ``{a, b}`` and
    ``{b, a}`` differ, as in Avro's Parsing Canonical Form), each ``"name":type`` with the name as a JSON
    string and the type as the schema language spells it (``list<T>``, ``bytes[N]``, a nested record in
    braces, ``?`` after an optional type, ``name?: T`` being ``T?``), no whitespace. A record's name is left
    out: no format writes it. A schema of field names only (a list, a class's field order) spells each type
    ``any``.

    >>> from wirepipe.schema import parse_schema
    >>> canonical_form(parse_schema({"id": "int64", "tags?": ["string"], "at": {"lat": "float64"}}))
    '{"id":int64,"tags":list<string>?,"at":{"lat":float64}}'
    >>> canonical_form(["b", "a"])
    '{"b":any,"a":any}'
    """
    if isinstance(schema, RecordSchema):
        return _canonical_record(schema)
    return "{" + ",".join(f"{_canonical_name(name)}:any" for name in schema) + "}"


def schema_fingerprint(schema: RecordSchema | Sequence[str]) -> str:
    """A schema's identity: the first 16 lowercase hex digits of the SHA-256 of its UTF-8 ``canonical_form``.
    The ``Wirepipe-Schema`` header of every message a typed format writes, what ``deserialize`` compares
    with its own, and what a registry keys a schema version by.

    >>> from wirepipe.schema import parse_schema
    >>> schema_fingerprint(parse_schema({"a": "int64", "b": "int64"}))
    '59fc81b9aa9d0fde'
    """
    digest = hashlib.sha256(canonical_form(schema).encode("utf-8")).hexdigest()
    return digest[:FINGERPRINT_DIGITS]


def _canonical_record(schema: RecordSchema) -> str:
    return "{" + ",".join(f"{_canonical_name(f.name)}:{_canonical_type(f.type)}" for f in schema.fields) + "}"


def _canonical_type(t: Type) -> str:
    if t.kind is Kind.FIXED:
        text = f"bytes[{t.size}]"
    elif t.kind is Kind.LIST:
        text = f"list<{_canonical_type(t.item)}>"  # type: ignore[arg-type]
    elif t.kind is Kind.RECORD:
        text = _canonical_record(t.record)  # type: ignore[arg-type]
    else:
        text = t.kind.value
    return text + "?" if t.optional else text


def _canonical_name(name: str) -> str:
    """A field name as a JSON string: UTF-8 as it is, ``"``, ``\\`` and control characters escaped (what
    ``JSON.stringify`` and ``serde_json`` write), so a name from inferred records (``"a b"``) is unambiguous."""
    return _SURROGATE.sub(_escaped, json.dumps(name, ensure_ascii=False))


_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate (a str holds no pairs): escaped, as JSON.stringify does


def _escaped(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"
