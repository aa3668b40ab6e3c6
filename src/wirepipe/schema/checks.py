"""Why a value does not fit a schema, naming the field path: the one check every format's refusal is
measured against (``codecs/checks.py`` pins that each format refuses what ``check_value`` refuses).

It reads the types it is given and builds none, so ``types`` (``RecordSchema.check``) can call it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .language import FLOATS, INTS, Kind

if TYPE_CHECKING:
    from .types import RecordSchema, Type


def check_record(schema: RecordSchema, value: Any, path: str) -> str | None:
    """Why ``value`` is not a ``schema`` record at ``path`` ("": the top), or None."""
    if not isinstance(value, Mapping):
        return f"{path or 'record'}: expected a record ({schema.name}), got {type(value).__name__}"
    for f in schema.fields:
        where = f"{path}.{f.name}" if path else f.name
        if f.name not in value:
            if f.type.optional:
                continue
            return f"{where}: missing (expected {f.type})"
        why = check_value(f.type, value[f.name], where)
        if why:
            return why
    return undeclared(schema.names, value, path)


def check_value(t: Type, v: Any, path: str) -> str | None:
    """Why ``v`` is not a ``t`` (naming ``path``), or None."""
    if v is None:
        return None if t.optional else f"{path}: null but {t} is not optional"
    kind = t.kind
    if kind in INTS:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{path}: expected {kind}, got {type(v).__name__} {v!r:.40}"
        lo, hi = INTS[kind]
        return None if lo <= v <= hi else f"{path}: {v} is out of range for {kind} ({lo}..{hi})"
    if kind in FLOATS:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        return None if ok else f"{path}: expected {kind}, got {type(v).__name__} {v!r:.40}"
    if kind == Kind.BOOL:
        return None if isinstance(v, bool) else f"{path}: expected bool, got {type(v).__name__} {v!r:.40}"
    if kind == Kind.STRING:
        return None if isinstance(v, str) else f"{path}: expected string, got {type(v).__name__} {v!r:.40}"
    if kind in (Kind.BYTES, Kind.FIXED):
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return f"{path}: expected {t.required()}, got {type(v).__name__} {v!r:.40}"
        if kind == Kind.FIXED and len(v) != t.size:
            return f"{path}: expected exactly {t.size} bytes, got {len(v)}"
        return None
    if kind == Kind.LIST:
        if not isinstance(v, (list, tuple)):
            return f"{path}: expected {t.required()}, got {type(v).__name__} {v!r:.40}"
        item = t.item
        assert item is not None
        for i, x in enumerate(v):
            why = check_value(item, x, f"{path}[{i}]")
            if why:
                return why
        return None
    assert t.record is not None
    return check_record(t.record, v, path)


def undeclared(names: Sequence[str], value: Mapping[str, Any], path: str = "") -> str | None:
    """Why a record has fields that ``names`` does not declare (naming them, and ``path`` for a nested
    record), or None: a schema never drops a field unless asked to (``serialize``'s ``extra_fields: drop``)."""
    extra = [k for k in value if k not in names]
    if not extra:
        return None
    return (f"{path or 'record'}: unknown field(s) {', '.join(map(str, extra))} (schema has {', '.join(names)}; "
            "extra_fields: drop on serialize leaves them out)")


def explain(schema: RecordSchema | None, value: Any, fallback: BaseException) -> str:
    """The reason a record failed to encode: the schema's field path when it finds one."""
    from ..core.batch import describe_error

    if schema is not None:
        if type(value) is list:  # a packed message: find the record that does not fit
            for i, rec in enumerate(value):
                why = schema.check(rec)
                if why:
                    return f"record {i}: {why}"
        else:
            why = schema.check(value)
            if why:
                return why
    return describe_error(fallback)
