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
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, overload


class Kind(str, Enum):
    """The kinds of type the language has (``Type.kind``): the one spelling every format compares with.

    A ``str`` enum, so a kind still equals its name (``Kind.INT32 == "int32"``) and prints as it.
    """

    INT32 = "int32"
    INT64 = "int64"
    UINT32 = "uint32"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    BOOL = "bool"
    STRING = "string"
    BYTES = "bytes"
    FIXED = "fixed"  # bytes[N]
    LIST = "list"
    RECORD = "record"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


INTS = {Kind.INT32: (-(2**31), 2**31 - 1), Kind.INT64: (-(2**63), 2**63 - 1), Kind.UINT32: (0, 2**32 - 1)}
FLOATS = (Kind.FLOAT32, Kind.FLOAT64)
PRIMITIVES = (*INTS, *FLOATS, Kind.BOOL, Kind.STRING, Kind.BYTES)
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

    kind: Kind
    size: int = 0
    item: Type | None = None
    record: RecordSchema | None = None
    optional: bool = False

    def __post_init__(self) -> None:
        if type(self.kind) is not Kind:  # spelled as its name: Type(Kind.INT32)
            object.__setattr__(self, "kind", Kind(self.kind))

    def __str__(self) -> str:
        if self.kind is Kind.FIXED:
            text = f"bytes[{self.size}]"
        elif self.kind is Kind.LIST:
            text = f"list<{self.item}>"
        elif self.kind is Kind.RECORD:
            text = "{" + ", ".join(f"{f.name}: {f.type}" for f in self.record.fields) + "}"  # type: ignore[union-attr]
        else:
            text = self.kind.value
        return text + "?" if self.optional else text

    def contains(self, *kinds: str) -> bool:
        """Whether this type, or any type inside it (list items, nested fields), is one of ``kinds``."""
        if self.kind in kinds:
            return True
        if self.kind == Kind.LIST:
            return self.item.contains(*kinds)  # type: ignore[union-attr]
        if self.kind == Kind.RECORD:
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
        if self.kind in (Kind.INT32, Kind.UINT32, Kind.FLOAT32):
            return 4
        if self.kind in (Kind.INT64, Kind.FLOAT64):
            return 8
        if self.kind == Kind.BOOL:
            return 1
        if self.kind == Kind.FIXED:
            return self.size
        if self.kind == Kind.RECORD:
            return self.record.fixed_width  # type: ignore[union-attr]
        return None

    def to_spec(self) -> Any:
        """The YAML/JSON spelling of this type."""
        if self.kind == Kind.RECORD:
            inner: Any = self.record.to_spec()  # type: ignore[union-attr]
            return inner
        if self.kind == Kind.LIST and self.item is not None and self.item.contains(Kind.RECORD):
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
        return f"{self.name} " + str(Type(Kind.RECORD, record=self))

    # --- spelling, files, Arrow -----------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """The fields as the YAML/JSON mapping they are written in (optional fields as ``name?``)."""
        out: dict[str, Any] = {}
        for f in self.fields:
            t = f.type
            if t.optional and t.contains(Kind.RECORD):  # no `?` after a mapping or [T]: the field's name says it
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
    if t.kind == Kind.FIXED:
        return pa.binary(t.size)
    if t.kind == Kind.LIST:
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
        return Type(Kind.RECORD, record=RecordSchema(_record_name(path), fields),
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
        return Type(Kind.RECORD, record=RecordSchema(_record_name(path), fields), optional=optional)
    if pt.is_list(t) or pt.is_large_list(t):
        items = array.flatten()
        if pt.is_null(items.type):
            raise SchemaError(path, "every list is empty (or null): no item type to infer; write it by hand")
        return Type(Kind.LIST, item=_inferred(items, path + "[]"), optional=optional)
    return _from_arrow_type(t, optional, path)


# --- identity: the canonical form and its fingerprint --------------------------------------------

FINGERPRINT_DIGITS = 16  # hex digits of the SHA-256 kept: 64 bits, the width of Avro's single-object fingerprint


def canonical_form(schema: RecordSchema | Sequence[str]) -> str:
    """The one text of a schema that its fingerprint is taken of: what the bytes of every format depend on,
    spelled one way. Fields in declaration order (the positional formats follow it, so ``{a, b}`` and
    ``{b, a}`` differ, as in Avro's Parsing Canonical Form), each ``"name":type`` with the name as a JSON
    string and the type as the schema language spells it (``list<T>``, ``bytes[N]``, a nested record in
    braces, ``?`` after an optional type, ``name?: T`` being ``T?``), no whitespace. A record's name is left
    out: no format writes it. A schema of field names only (a list, a class's field order) spells each type
    ``any``.

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
        return Type(Kind.RECORD, record=_parse_record(spec, _record_name(path), path))
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
    return _check_record(t.record, v, path)


# Keys that are an envelope's, not a field: Faust's metadata (``"__faust": {"ns": ...}``), which a
# positional format, given the record class's field names, leaves out as Faust's own readers do.
ENVELOPE_KEYS = frozenset({"__faust"})


def undeclared(names: Sequence[str], value: Mapping[str, Any], path: str = "") -> str | None:
    """Why a record has fields that ``names`` does not declare (naming them, and ``path`` for a nested
    record), or None: a schema never drops a field unless asked to (``serialize``'s ``extra_fields: drop``)."""
    extra = [k for k in value if k not in names]
    if not extra:
        return None
    return (f"{path or 'record'}: unknown field(s) {', '.join(map(str, extra))} (schema has {', '.join(names)}; "
            "extra_fields: drop on serialize leaves them out)")


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
        if t.kind == Kind.RECORD:
            return fill_record(t.record, v)  # type: ignore[arg-type]
        if t.kind == Kind.LIST and t.item is not None and t.item.kind in (Kind.RECORD, Kind.LIST):
            return [fill(t.item, x) for x in v]
        return v

    def fill_record(s: RecordSchema, rec: dict[str, Any]) -> dict[str, Any]:
        return {f.name: fill(f.type, rec.get(f.name)) for f in s.fields}

    return lambda rec: fill_record(schema, rec)
