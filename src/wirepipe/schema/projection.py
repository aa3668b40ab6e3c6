"""A record in its schema's shape: the fields the schema does not declare dropped (``projection``:
``serialize``'s ``extra_fields: drop``), the optional ones it does declare and the record lacks filled with
None (``with_defaults``: a decoded record's shape).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .extra_fields import undeclared_test
from .language import Kind
from .types import RecordSchema, Type


def projection(schema: RecordSchema | Sequence[str]) -> Callable[[Any], Any]:
    """A function that returns a record without the fields ``schema`` does not declare (nested records
    too; a list of records, record by record): the record itself when it has none, else a new one, so
    ``projected is not record`` tells the records that lost fields. ``serialize``'s ``extra_fields: drop``."""
    fits = undeclared_test(schema)
    cut = _project_record(schema) if isinstance(schema, RecordSchema) else _project_names(tuple(schema))

    def project(value: Any) -> Any:
        if fits(value):
            return value
        return [cut(r) for r in value] if type(value) is list else cut(value)

    return project


def _project_names(names: tuple[str, ...]) -> Callable[[Any], Any]:
    keep = frozenset(names)
    return lambda v: {k: x for k, x in v.items() if k in keep} if type(v) is dict else v


def _project_record(schema: RecordSchema) -> Callable[[Any], Any]:
    keep = frozenset(schema.names)
    nested = {f.name: _project_value(f.type) for f in schema.fields if f.type.contains(Kind.RECORD)}

    def record(v: Any) -> Any:
        if type(v) is not dict:
            return v
        return {k: (nested[k](x) if k in nested and x is not None else x) for k, x in v.items() if k in keep}

    return record


def _project_value(t: Type) -> Callable[[Any], Any]:
    if t.kind == Kind.RECORD:
        return _project_record(t.record)  # type: ignore[arg-type]
    item = _project_value(t.item)  # type: ignore[arg-type]
    return lambda v: [x if x is None else item(x) for x in v] if type(v) is list else v


def with_defaults(schema: RecordSchema) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function that fills every absent optional field of a record with ``None`` (decoded shape)."""

    def fill(t: Type, v: Any) -> Any:
        if v is None:
            return None
        if t.kind == Kind.RECORD:
            return fill_record(t.record, v)  # type: ignore[arg-type]
        if t.kind == Kind.LIST and t.item is not None and t.item.kind in (Kind.RECORD, Kind.LIST):
            return [fill(t.item, x) for x in v]
        return v

    def fill_record(s: RecordSchema, rec: dict[str, Any]) -> dict[str, Any]:
        return {f.name: fill(f.type, rec.get(f.name)) for f in s.fields}

    return lambda rec: fill_record(schema, rec)
