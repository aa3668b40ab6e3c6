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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

INTS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1)}
FLOATS = ("float32", "float64")
PRIMITIVES = (*INTS, *FLOATS, "bool", "string", "bytes")
ALLOWED = ("int32, int64, uint32, float32, float64, bool, string, bytes, bytes[N], list<T>, "
           "[T], a nested {field: type} mapping, T? (optional)")
_FIXED = re.compile(r"^bytes\[(\d+)\]$")
_LIST = re.compile(r"^list<(.+)>$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaError(ValueError):
    """A schema that cannot be read: names the field path, the bad value and what is allowed."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"schema field {path}: {message}" if path else f"schema: {message}")


@dataclass(frozen=True)
class Type:
    """The type of one field: a primitive, ``fixed`` (bytes[N]), ``list`` or ``record``."""

    kind: str
    size: int = 0
    item: Type | None = None
    record: RecordSchema | None = None
    optional: bool = False

    def __str__(self) -> str:
        if self.kind == "fixed":
            text = f"bytes[{self.size}]"
        elif self.kind == "list":
            text = f"list<{self.item}>"
        elif self.kind == "record":
            text = "{" + ", ".join(f"{f.name}: {f.type}" for f in self.record.fields) + "}"  # type: ignore[union-attr]
        else:
            text = self.kind
        return text + "?" if self.optional else text

    def contains(self, *kinds: str) -> bool:
        """Whether this type, or any type inside it (list items, nested fields), is one of ``kinds``."""
        if self.kind in kinds:
            return True
        if self.kind == "list":
            return self.item.contains(*kinds)  # type: ignore[union-attr]
        if self.kind == "record":
            return any(f.type.contains(*kinds) for f in self.record.fields)  # type: ignore[union-attr]
        return False

    def required(self) -> Type:
        """The same type without ``optional``."""
        return Type(self.kind, self.size, self.item, self.record) if self.optional else self

    @property
    def fixed_width(self) -> int | None:
        """Bytes this type takes in bincode's fixint layout when that never varies, else None."""
        if self.optional:
            return None
        if self.kind in ("int32", "uint32", "float32"):
            return 4
        if self.kind in ("int64", "float64"):
            return 8
        if self.kind == "bool":
            return 1
        if self.kind == "fixed":
            return self.size
        if self.kind == "record":
            return self.record.fixed_width  # type: ignore[union-attr]
        return None

    def to_spec(self) -> Any:
        """The YAML/JSON spelling of this type."""
        if self.kind == "record":
            inner: Any = self.record.to_spec()  # type: ignore[union-attr]
            return inner
        if self.kind == "list" and self.item is not None and self.item.contains("record"):
            return [self.item.to_spec()]  # a record inside has no string spelling: [T], nested as deep as it goes
        return str(self)


@dataclass(frozen=True)
class Field:
    name: str
    type: Type


@dataclass(frozen=True, eq=True)
class RecordSchema(Sequence[str]):
    """A record: a name and its fields in order. Iterates (and indexes) as its field names."""

    name: str
    fields: tuple[Field, ...] = field(default=())
    # the native schema this one was read from (a protobuf descriptor ...), used by its own format
    source: Any = field(default=None, compare=False, repr=False)

    # --- a sequence of field names ---------------------------------------------------------
    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> Any:
        return self.names[i]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def fixed_width(self) -> int | None:
        """The record's size in bincode's fixint layout when every field has a fixed width."""
        total = 0
        for f in self.fields:
            w = f.type.fixed_width
            if w is None:
                return None
            total += w
        return total

    def __str__(self) -> str:
        return f"{self.name} " + str(Type("record", record=self))

    # --- spelling, files, Arrow -----------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """The fields as the YAML/JSON mapping they are written in (optional fields as ``name?``)."""
        out: dict[str, Any] = {}
        for f in self.fields:
            t = f.type
            if t.optional and t.contains("record"):  # no `?` after a mapping or [T]: the field's name says it
                out[f.name + "?"] = t.required().to_spec()
            else:
                out[f.name] = t.to_spec()
        return out

    def to_document(self) -> dict[str, Any]:
        return {"name": self.name, "fields": self.to_spec()}

    def to_arrow(self) -> Any:
        """The equivalent ``pyarrow.Schema`` (optional fields nullable; bytes[N] is fixed_size_binary)."""
        import pyarrow as pa

        return pa.schema([pa.field(f.name, _arrow_type(f.type), nullable=f.type.optional) for f in self.fields])

    def check(self, value: Any) -> str | None:
        """Why ``value`` does not fit this schema (naming the field path), or None when it fits."""
        return _check_record(self, value, "")


def _arrow_type(t: Type) -> Any:
    import pyarrow as pa

    simple = {"int32": pa.int32(), "int64": pa.int64(), "uint32": pa.uint32(), "float32": pa.float32(),
              "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(), "bytes": pa.binary()}
    if t.kind in simple:
        return simple[t.kind]
    if t.kind == "fixed":
        return pa.binary(t.size)
    if t.kind == "list":
        item = t.item
        assert item is not None
        return pa.list_(pa.field("item", _arrow_type(item), nullable=item.optional))
    rec = t.record
    assert rec is not None
    return pa.struct([pa.field(f.name, _arrow_type(f.type), nullable=f.type.optional) for f in rec.fields])


def from_arrow(schema: Any, name: str = "Record") -> RecordSchema:
    """A ``RecordSchema`` from a ``pyarrow.Schema`` (``SchemaError`` for types the language lacks)."""
    return RecordSchema(name, tuple(Field(f.name, _from_arrow_type(f.type, f.nullable, f.name)) for f in schema))


def _from_arrow_type(t: Any, nullable: bool, path: str) -> Type:
    import pyarrow.types as pt

    simple = [(pt.is_int32, "int32"), (pt.is_int64, "int64"), (pt.is_uint32, "uint32"), (pt.is_float32, "float32"),
              (pt.is_float64, "float64"), (pt.is_boolean, "bool")]
    for test, kind in simple:
        if test(t):
            return Type(kind, optional=nullable)
    if pt.is_string(t) or pt.is_large_string(t):
        return Type("string", optional=nullable)
    if pt.is_fixed_size_binary(t):
        return Type("fixed", size=t.byte_width, optional=nullable)
    if pt.is_binary(t) or pt.is_large_binary(t):
        return Type("bytes", optional=nullable)
    if pt.is_list(t) or pt.is_large_list(t):
        f = t.value_field
        return Type("list", item=_from_arrow_type(f.type, f.nullable, path + "[]"), optional=nullable)
    if pt.is_struct(t):
        fields = tuple(Field(t.field(i).name, _from_arrow_type(t.field(i).type, t.field(i).nullable,
                                                                f"{path}.{t.field(i).name}"))
                       for i in range(t.num_fields))
        return Type("record", record=RecordSchema(_record_name(path), fields),
                    optional=nullable)
    if pt.is_integer(t) and t.bit_width < 32:  # int8/int16/uint8/uint16 widen to int32
        return Type("int32", optional=nullable)
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
        return Type("record", record=RecordSchema(_record_name(path), fields), optional=optional)
    if pt.is_list(t) or pt.is_large_list(t):
        items = array.flatten()
        if pt.is_null(items.type):
            raise SchemaError(path, "every list is empty (or null): no item type to infer; write it by hand")
        return Type("list", item=_inferred(items, path + "[]"), optional=optional)
    return _from_arrow_type(t, optional, path)


# --- parsing ---------------------------------------------------------------------------------


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
    wirepipe.schema.SchemaError: schema field x: unknown type 'int8': allowed int32, int64, uint32, ...
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
        return Type("record", record=_parse_record(spec, _record_name(path), path))
    if isinstance(spec, list):
        if len(spec) != 1:
            raise SchemaError(path, f"a list type is written [T] with one item type, got {spec!r}")
        return Type("list", item=parse_type(spec[0], path + "[]"))
    if not isinstance(spec, str):
        raise SchemaError(path, f"{spec!r} is not a type: allowed {ALLOWED}")
    text = spec.strip()
    optional = text.endswith("?")
    if optional:
        text = text[:-1].strip()
    if text in PRIMITIVES:
        return Type(text, optional=optional)
    m = _FIXED.match(text)
    if m:
        size = int(m.group(1))
        if size < 1:
            raise SchemaError(path, f"{spec!r}: bytes[N] needs N >= 1")
        return Type("fixed", size=size, optional=optional)
    m = _LIST.match(text)
    if m:
        return Type("list", item=parse_type(m.group(1), path + "[]"), optional=optional)
    raise SchemaError(path, f"unknown type {spec!r}: allowed {ALLOWED}")


def _record_name(path: str) -> str:
    last = path.replace("[]", "").split(".")[-1] or "Record"
    return "".join(part.title() for part in last.split("_"))


def load_schema_file(path: str | Path) -> RecordSchema:
    """A schema from a ``.yaml``/``.yml``/``.json`` file (``SchemaError`` naming the file)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
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
        return parse_schema(spec, name=_record_name(p.stem))
    except SchemaError as exc:
        raise SchemaError(exc.path, f"{exc.message} (in {p})") from None


# --- checking values -----------------------------------------------------------------------------


def _check_record(schema: RecordSchema, value: Any, path: str) -> str | None:
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
    extra = [k for k in value if k not in schema.names]
    if extra:
        return f"{path or 'record'}: unknown field(s) {', '.join(map(str, extra))} (schema has {', '.join(schema.names)})"
    return None


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
    if kind == "bool":
        return None if isinstance(v, bool) else f"{path}: expected bool, got {type(v).__name__} {v!r:.40}"
    if kind == "string":
        return None if isinstance(v, str) else f"{path}: expected string, got {type(v).__name__} {v!r:.40}"
    if kind in ("bytes", "fixed"):
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return f"{path}: expected {t.required()}, got {type(v).__name__} {v!r:.40}"
        if kind == "fixed" and len(v) != t.size:
            return f"{path}: expected exactly {t.size} bytes, got {len(v)}"
        return None
    if kind == "list":
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
    return _check_record(t.record, v, path)


def explain(schema: RecordSchema | None, value: Any, fallback: BaseException) -> str:
    """The reason a record failed to encode: the schema's field path when it finds one."""
    from .core.batch import describe_error

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


def with_defaults(schema: RecordSchema) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A function that fills every absent optional field of a record with ``None`` (decoded shape)."""

    def fill(t: Type, v: Any) -> Any:
        if v is None:
            return None
        if t.kind == "record":
            return fill_record(t.record, v)  # type: ignore[arg-type]
        if t.kind == "list" and t.item is not None and t.item.kind in ("record", "list"):
            return [fill(t.item, x) for x in v]
        return v

    def fill_record(s: RecordSchema, rec: dict[str, Any]) -> dict[str, Any]:
        return {f.name: fill(f.type, rec.get(f.name)) for f in s.fields}

    return lambda rec: fill_record(schema, rec)
