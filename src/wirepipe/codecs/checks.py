"""The one fast check of values against a typed schema, for every encoder whose library writes what it
is given: avro, protobuf (the class wirepipe builds), bson, flexbuffers, msgpack-array, and the formats
that take no schema given a typed one.

``validator`` converts a record to ``msgspec.Struct`` classes built once from the schema, in C, and
throws the result away: it says yes (returns) or no (raises, with the path: ``Expected `int`, got
`bool` - at `$.y```). Why a record does not fit, in the schema's words and with the field path, is
``schema.check_value``'s (``schema.explain`` after a refusal): the rules are the schema's, and a
format's property tests pin that every checker refuses what ``check_value`` refuses. The fixed
layouts (``layout_encoders.py``) and msgspec's typed decoders check as they write or read (a
separate check would cost more than the write), by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..schema import INTS, Kind, RecordSchema, Type
from .msgspec_engine import python_type, unique_name

_NUMBERS = (*INTS, "float32", "float64")


def validator(schema: RecordSchema, *, numeric_lists: bool = True,
              may_be_absent: Mapping[str, Collection[str]] | None = None) -> Callable[[Any], None]:
    """A check that a record, or a list of records (a framed message), fits ``schema``: raises
    ``msgspec.ValidationError`` naming the path (``Expected `int`, got `bool` - at `$.y```) when not.

    For encoders whose library writes a misfit as some other value instead of refusing it: fastavro
    writes 1.5 for an int as 1 and None for a bool as false; protobuf writes None as "unset" (read
    back as 0) and takes True for an int32. The record is converted to ``msgspec.Struct`` classes
    built once from the schema, in C, and the result thrown away: measured ~0.25 us a ``point`` or
    ``feed`` record, ~0.8 us a ``transaction`` (TypedDicts, which the decoders use, take ~4x as long
    to convert to). It takes what ``schema.check`` takes, numpy values excepted (the caller retries
    with ``as_lists``); a str for bytes is refused (msgspec alone would read it as base64, and bson
    would write it as a string); a field the schema does not declare is refused (fastavro and bson would
    leave it out or write it: a schema never drops a field unless ``extra_fields: drop`` asks).

    ``numeric_lists=False`` leaves lists of numbers to the format (protobuf checks its repeated
    scalars itself; converting the 67k numbers of a ``large_vectors`` record would cost ~400 us).
    ``may_be_absent`` names, by record name, fields that may be left out though not optional
    (an ``.avsc`` field with a ``default``, which fastavro writes in its place).
    """
    import msgspec

    record = _struct(schema, {}, numeric_lists, may_be_absent or {})
    framed = list[record]  # type: ignore[valid-type]
    convert = msgspec.convert
    native = (bytes, bytearray, memoryview)  # taken as they are: a str is not base64 for a bytes field here

    def check(value: Any) -> None:
        convert(value, framed if type(value) is list else record, builtin_types=native)

    return check


def as_lists(v: Any) -> Any:
    """``v`` with numpy arrays and tuples as lists and numpy scalars as Python numbers, or ``v`` itself
    when it holds none. An encoder that checks with ``validator`` retries with it when a record is
    refused, so that an array where the schema has a list is that list (the validator takes lists
    only, as fastavro does in a union) and plain values pay nothing for it."""
    t = type(v)
    if t is dict:
        out = {k: as_lists(x) for k, x in v.items()}
        return v if all(out[k] is x for k, x in v.items()) else out
    if t is list or t is tuple:
        items = [as_lists(x) for x in v]
        return v if t is list and all(a is b for a, b in zip(items, v, strict=True)) else items
    if t is not memoryview and hasattr(v, "tolist"):
        return as_lists(v.tolist())
    return v


def checked(validate: Callable[[Any], None], write: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """``write`` behind ``validate``; a value refused (by either) is tried once more as plain lists
    (``as_lists``: a numpy array where the schema has a list, a tuple), so plain values pay nothing
    for taking arrays, and a real misfit raises as it was refused."""
    def encode(value: Any) -> bytes:
        try:
            validate(value)
            return write(value)
        except Exception:
            lists = as_lists(value)
            if lists is value:
                raise
        validate(lists)
        return write(lists)

    return encode


def _struct(schema: RecordSchema, names: dict[str, int], numeric_lists: bool,
            may_be_absent: Mapping[str, Collection[str]]) -> Any:
    import msgspec

    absent = may_be_absent.get(schema.name, ())
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in schema.fields:
        t = _checked_type(f.type, names, numeric_lists, may_be_absent)
        fields.append((f.name, t, None) if f.type.optional or f.name in absent else (f.name, t))
    return msgspec.defstruct(unique_name(schema.name, names), fields, kw_only=True, forbid_unknown_fields=True)


def _checked_type(t: Type, names: dict[str, int], numeric_lists: bool,
                  may_be_absent: Mapping[str, Collection[str]]) -> Any:
    if t.kind == Kind.LIST:
        item = t.item
        assert item is not None
        if not numeric_lists and item.kind in _NUMBERS and not item.optional:
            out: Any = Any  # the format checks them (and takes numpy arrays as they are)
        else:
            out = list[_checked_type(item, names, numeric_lists, may_be_absent)]  # type: ignore[misc]
    elif t.kind == Kind.RECORD:
        out = _struct(t.record, names, numeric_lists, may_be_absent)  # type: ignore[arg-type]
    else:
        return python_type(t, False, names)
    return out | None if t.optional else out
