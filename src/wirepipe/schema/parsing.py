"""A typed schema read from its YAML/JSON spelling: a mapping (``parse_schema``), one type (``parse_type``)
or a file (``load_schema_file``); ``SchemaError`` names the field path, the value and what is allowed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.limits import MAX_SCHEMA_FILE, read_at_most
from .language import ALLOWED, PRIMITIVES, Kind, SchemaError, record_name
from .types import Field, RecordSchema, Type

_FIXED = re.compile(r"^bytes\[(\d+)\]$")
_LIST = re.compile(r"^list<(.+)>$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_schema(spec: Any, name: str = "Record") -> RecordSchema:
    """A ``RecordSchema`` from its mapping: the fields alone, or ``{name:, fields:}``.

    >>> point = parse_schema({"name": "Point", "fields": {"x": "int32", "y": "int32", "label?": "string"}})
    >>> print(point)
    Point {x: int32, y: int32, label: string?}
    >>> list(point), point.fixed_width  # its field names; label's width varies
    (['x', 'y', 'label'], None)
    >>> point.check({"x": 1, "y": "2"})
    "y: expected int32, got str '2'"
    >>> parse_schema({"x": "int8"})
    Traceback (most recent call last):
    ...
    wirepipe.schema.language.SchemaError: schema field x: unknown type 'int8': allowed int32, int64, uint32, ...
    """
    if isinstance(spec, RecordSchema):
        return spec
    if not isinstance(spec, Mapping) or not spec:
        raise SchemaError("", f"expected a mapping of field: type, got {spec!r}")
    if isinstance(spec.get("fields"), Mapping) and set(spec) <= {"name", "fields", "doc"}:
        name = str(spec.get("name", name))
        spec = spec["fields"]
    return _parse_record(spec, name, "")


def _parse_record(spec: Mapping[str, Any], name: str, path: str) -> RecordSchema:
    fields = []
    for key, tspec in spec.items():
        if not isinstance(key, str):
            raise SchemaError(path, f"field name {key!r} is not a string")
        optional = key.endswith("?")
        fname = key[:-1] if optional else key
        where = f"{path}.{fname}" if path else fname
        if not _NAME.match(fname):
            raise SchemaError(where, f"{fname!r} is not a field name: letters, digits and _ (not first)")
        t = parse_type(tspec, where)
        if optional and not t.optional:
            t = Type(t.kind, t.size, t.item, t.record, optional=True)
        fields.append(Field(fname, t))
    if not fields:
        raise SchemaError(path, "a record needs at least one field")
    return RecordSchema(name, tuple(fields))


def parse_type(spec: Any, path: str) -> Type:
    """One field's type from its spelling (``SchemaError`` naming ``path`` otherwise)."""
    if isinstance(spec, Mapping):
        return Type(Kind.RECORD, record=_parse_record(spec, record_name(path), path))
    if isinstance(spec, list):
        if len(spec) != 1:
            raise SchemaError(path, f"a list type is written [T] with one item type, got {spec!r}")
        return Type(Kind.LIST, item=parse_type(spec[0], path + "[]"))
    if not isinstance(spec, str):
        raise SchemaError(path, f"{spec!r} is not a type: allowed {ALLOWED}")
    text = spec.strip()
    optional = text.endswith("?")
    if optional:
        text = text[:-1].strip()
    if text in PRIMITIVES:
        return Type(Kind(text), optional=optional)
    m = _FIXED.match(text)
    if m:
        size = int(m.group(1))
        if size < 1:
            raise SchemaError(path, f"{spec!r}: bytes[N] needs N >= 1")
        return Type(Kind.FIXED, size=size, optional=optional)
    m = _LIST.match(text)
    if m:
        return Type(Kind.LIST, item=parse_type(m.group(1), path + "[]"), optional=optional)
    raise SchemaError(path, f"unknown type {spec!r}: allowed {ALLOWED}")


def load_schema_file(path: str | Path) -> RecordSchema:
    """A schema from a ``.yaml``/``.yml``/``.json`` file (``SchemaError`` naming the file)."""
    p = Path(path)
    try:
        text = read_at_most(p, MAX_SCHEMA_FILE, "a schema file").decode("utf-8")
    except OSError as exc:
        raise SchemaError("", f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        if p.suffix == ".json":
            spec = json.loads(text)
        else:
            import yaml

            spec = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError
        raise SchemaError("", f"{p} is not valid JSON: {exc}") from None
    except Exception as exc:  # yaml.YAMLError (yaml is imported lazily, so its class is not named here)
        raise SchemaError("", f"{p} is not valid YAML: {exc}") from None
    try:
        return parse_schema(spec, name=record_name(p.stem))
    except SchemaError as exc:
        raise SchemaError(exc.path, f"{exc.message} (in {p})") from None
