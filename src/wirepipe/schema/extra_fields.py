"""Whether records declare fields a schema does not: one record (``undeclared_test``) or a column of them at
once (``undeclared_column_test``), nested records included. What ``serialize`` refuses by default (``checks.
undeclared`` says why) and drops with ``extra_fields: drop`` (``projection``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .language import Kind
from .types import Field, RecordSchema, Type

# Keys that are an envelope's, not a field: Faust's metadata (``"__faust": {"ns": ...}``), which a
# positional format, given the record class's field names, leaves out as Faust's own readers do.
ENVELOPE_KEYS = frozenset({"__faust"})


def undeclared_test(schema: RecordSchema | Sequence[str]) -> Callable[[Any], bool]:
    """A test that a record declares no field outside ``schema``, nested records included (True: it
    fits); a list (a framed message) fits when each record does. Only keys are looked at: values that
    are not records are other checks' business."""
    record = _keys_tests(schema)

    def fits(value: Any) -> bool:
        return all(map(record, value)) if type(value) is list else record(value)

    return fits


def undeclared_column_test(schema: RecordSchema | Sequence[str]) -> Callable[[list[Any]], bool]:
    """``undeclared_test`` over a column of records (dicts) at once, level by level: at each level one C call,
    the union of the records' keys (a dict's keys come with their hashes: ~25 ns a ``point`` record, less
    than half of msgspec's encode of it; ``issuperset`` per record took ~70), then the nested records of
    the whole column gathered by a comprehension and tested alike. So an encoder that does not otherwise
    look at a record's keys pays little. It raises on a value that is not a record (``TypeError``,
    ``AttributeError``; or answers False): the caller redoes the column record by record with
    ``undeclared_test``."""
    if not isinstance(schema, RecordSchema):
        names = frozenset(schema).union(ENVELOPE_KEYS)
        return lambda values: set().union(*values) <= names
    return _column_keys_test(schema)


def _column_keys_test(schema: RecordSchema) -> Callable[[list[Any]], bool]:
    names = frozenset(schema.names)
    nested = [(_nested_records(f), _column_keys_test(_record_in(f.type)))
              for f in schema.fields if f.type.contains(Kind.RECORD)]
    if not nested:
        return lambda values: set().union(*values) <= names

    def test(values: list[Any]) -> bool:
        if not set().union(*values) <= names:
            return False
        for gather, inner in nested:
            records = gather(values)
            if records and not inner(records):
                return False
        return True

    return test


def _record_in(t: Type) -> RecordSchema:
    while t.kind == Kind.LIST:
        t = t.item  # type: ignore[assignment]
    return t.record  # type: ignore[return-value]


def _nested_records(f: Field) -> Callable[[list[Any]], list[Any]]:
    """The records of field ``f`` across a column of records, in one comprehension (a record, or lists of them as
    deep as its type goes; absent and null ones left out)."""
    from itertools import repeat
    from operator import itemgetter

    name, t = f.name, f.type
    values: Callable[[list[Any]], Any] = (lambda rs: map(dict.get, rs, repeat(name))) if t.optional \
        else (lambda rs: map(itemgetter(name), rs))  # a required field's absence raises: checked record by record
    if t.kind == Kind.RECORD:
        return lambda rs: [x for x in values(rs) if x is not None]
    depth = 1
    item = t.item
    while item is not None and item.kind == Kind.LIST:
        depth, item = depth + 1, item.item
    if depth == 1:
        return lambda rs: [y for x in values(rs) if x for y in x if y is not None]

    def flatten(rs: list[Any]) -> list[Any]:
        xs = [y for x in values(rs) if x for y in x]
        for _ in range(depth - 1):
            xs = [y for x in xs if x for y in x]
        return [x for x in xs if x is not None]

    return flatten


def _keys_tests(schema: RecordSchema | Sequence[str]) -> Callable[[Any], bool]:
    """A test of one record's keys (the names ``schema`` declares, nested records too)."""
    if not isinstance(schema, RecordSchema):
        superset = frozenset(schema).union(ENVELOPE_KEYS).issuperset
        return lambda v: type(v) is not dict or superset(v)
    return _keys_test(schema)


def _keys_test(schema: RecordSchema) -> Callable[[Any], bool]:
    superset = frozenset(schema.names).issuperset
    nested = [(f.name, _nested_keys_test(f.type)) for f in schema.fields if f.type.contains(Kind.RECORD)]
    if not nested:
        return lambda v: type(v) is not dict or superset(v)

    def record(v: Any) -> bool:
        if type(v) is not dict:
            return True
        if not superset(v):
            return False
        for name, test in nested:
            x = v.get(name)
            if x is not None and not test(x):
                return False
        return True

    return record


def _nested_keys_test(t: Type) -> Callable[[Any], bool]:
    if t.kind == Kind.RECORD:
        return _keys_test(t.record)  # type: ignore[arg-type]
    item = _nested_keys_test(t.item)  # type: ignore[arg-type]  # a list whose items hold records
    return lambda v: type(v) is not list or all(x is None or item(x) for x in v)
