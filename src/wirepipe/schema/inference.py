"""A typed schema read from Arrow: an Arrow schema's (``from_arrow``, the other direction of
``RecordSchema.to_arrow``) and records' as Arrow infers their types (``infer_schema``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .language import ALLOWED, Kind, SchemaError, record_name
from .types import Field, RecordSchema, Type


def from_arrow(schema: Any, name: str = "Record") -> RecordSchema:
    """A ``RecordSchema`` from a ``pyarrow.Schema`` (``SchemaError`` for types the language lacks)."""
    return RecordSchema(name, tuple(Field(f.name, _from_arrow_type(f.type, f.nullable, f.name)) for f in schema))


def _from_arrow_type(t: Any, nullable: bool, path: str) -> Type:
    import pyarrow.types as pt

    simple = [(pt.is_int32, Kind.INT32), (pt.is_int64, Kind.INT64), (pt.is_uint32, Kind.UINT32), (pt.is_float32, Kind.FLOAT32),
              (pt.is_float64, Kind.FLOAT64), (pt.is_boolean, Kind.BOOL)]
    for test, kind in simple:
        if test(t):
            return Type(kind, optional=nullable)
    if pt.is_string(t) or pt.is_large_string(t):
        return Type(Kind.STRING, optional=nullable)
    if pt.is_fixed_size_binary(t):
        return Type(Kind.FIXED, size=t.byte_width, optional=nullable)
    if pt.is_binary(t) or pt.is_large_binary(t):
        return Type(Kind.BYTES, optional=nullable)
    if pt.is_list(t) or pt.is_large_list(t):
        f = t.value_field
        return Type(Kind.LIST, item=_from_arrow_type(f.type, f.nullable, path + "[]"), optional=nullable)
    if pt.is_struct(t):
        fields = tuple(Field(t.field(i).name, _from_arrow_type(t.field(i).type, t.field(i).nullable,
                                                                f"{path}.{t.field(i).name}"))
                       for i in range(t.num_fields))
        return Type(Kind.RECORD, record=RecordSchema(record_name(path), fields),
                    optional=nullable)
    if pt.is_integer(t) and t.bit_width < 32:  # int8/int16/uint8/uint16 widen to int32
        return Type(Kind.INT32, optional=nullable)
    raise SchemaError(path, f"Arrow type {t} has no equivalent: allowed {ALLOWED}")


def infer_schema(records: Sequence[Mapping[str, Any]], name: str = "Record") -> RecordSchema:
    """The typed schema of records (dicts) as Arrow infers their types, the one inference wirepipe has
    (``wirepipe schema infer``, ``bench --input``): a field, at any depth, is optional (``?``) where it is
    absent or null in some record, required where every record has it.

    >>> print(infer_schema([{"ts": 1, "msg": "a", "tags": ["x"]}, {"ts": 2, "msg": None, "tags": []}], "Log"))
    Log {ts: int64, msg: string?, tags: list<string>}

    ``SchemaError`` (naming the field) where the records give no type the language has: a field null in
    every record, two types in one field.
    """
    import pyarrow as pa

    try:
        # one struct array, not Table.from_pylist: that takes its fields from the first record's keys only
        rows = pa.array(list(records))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaError("", f"the records do not share one type per field ({exc})") from None
    if not pa.types.is_struct(rows.type):
        raise SchemaError("", f"the records are not mappings of fields (Arrow reads them as {rows.type})")
    t = rows.type
    return RecordSchema(name, tuple(Field(t.field(i).name, _inferred(rows.field(i), t.field(i).name))
                                    for i in range(t.num_fields)))


def _inferred(array: Any, path: str) -> Type:
    """A column's type, optional where it holds a null (nested fields: a null where their parent is set)."""
    import pyarrow.compute as pc
    import pyarrow.types as pt

    t, optional = array.type, array.null_count > 0
    if pt.is_null(t):
        raise SchemaError(path, "null in every record: no type to infer; write it by hand")
    if pt.is_struct(t):
        present = array.filter(pc.is_valid(array))
        fields = tuple(Field(t.field(i).name, _inferred(present.field(i), f"{path}.{t.field(i).name}"))
                       for i in range(t.num_fields))
        return Type(Kind.RECORD, record=RecordSchema(record_name(path), fields), optional=optional)
    if pt.is_list(t) or pt.is_large_list(t):
        items = array.flatten()
        if pt.is_null(items.type):
            raise SchemaError(path, "every list is empty (or null): no item type to infer; write it by hand")
        return Type(Kind.LIST, item=_inferred(items, path + "[]"), optional=optional)
    return _from_arrow_type(t, optional, path)
