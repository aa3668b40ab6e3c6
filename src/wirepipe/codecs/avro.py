"""Avro: schemaless binary (``fastavro``), optionally in the Confluent wire framing.

The Avro schema is derived from the typed schema (or read from the user's ``.avsc``):
int32 -> int, int64 -> long, uint32 -> long (Avro has no unsigned), float32 -> float,
float64 -> double, bool -> boolean, string -> string, bytes -> bytes, bytes[N] -> fixed(N),
list<T> -> array<T>, record -> record, T? -> ["null", T].

A payload is the record's Avro binary and nothing else; with ``schema_id: N`` it is prefixed
by the Confluent framing (byte 0, then N as 4 bytes big-endian), so a consumer of a schema
registry reads it. A framed message (several records) is an Avro ``array`` of the record.

fastavro writes a value that does not fit as some other value (1.5 for an int as 1, None or "x"
for a boolean as false or true, an out-of-range int32 as a long), so each record is checked
against the schema first (``codecs/checks.py``'s ``validator``, in C: less than the range check it
replaces took) and a misfit is refused with its field path, as is a field the schema does not
declare (fastavro would leave it out). A numpy array where the schema has a
list is written as that list.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from ..core.errors import StageError
from ..schema import Field, Kind, RecordSchema, SchemaError, Type
from .checks import checked, validator

_AVRO = {"int32": "int", "int64": "long", "uint32": "long", "float32": "float", "float64": "double",
         "bool": "boolean", "string": "string", "bytes": "bytes"}


def avro_schema(schema: RecordSchema) -> dict[str, Any]:
    """The Avro schema (a JSON-able dict) for ``schema``; names made unique as Avro requires."""
    used: dict[str, int] = {}

    def name(base: str) -> str:
        n = used.get(base, 0)
        used[base] = n + 1
        return base if not n else f"{base}{n}"

    def typ(t: Type, field_name: str) -> Any:
        if t.kind in _AVRO:
            out: Any = _AVRO[t.kind]
        elif t.kind == Kind.FIXED:
            out = {"type": "fixed", "name": name(f"{field_name}_{t.size}"), "size": t.size}
        elif t.kind == Kind.LIST:
            out = {"type": "array", "items": typ(t.item, field_name)}  # type: ignore[arg-type]
        else:
            out = record(t.record)  # type: ignore[arg-type]
        return ["null", out] if t.optional else out

    def record(s: RecordSchema) -> dict[str, Any]:
        return {"type": "record", "name": name(s.name),
                "fields": [{"name": f.name, "type": typ(f.type, f.name)} for f in s.fields]}

    return record(schema)


def schema_of_avsc(avsc: Any, path: str = "") -> RecordSchema:
    """A ``RecordSchema`` from an Avro record schema (``SchemaError`` for what the language lacks)."""
    named: dict[str, Any] = {}

    def typ(a: Any, where: str) -> Type:
        if isinstance(a, list):
            rest = [x for x in a if x != "null"]
            if len(rest) != 1 or len(rest) == len(a):
                raise SchemaError(where, f"union {a} has no equivalent (only [\"null\", T])")
            t = typ(rest[0], where)
            return Type(t.kind, t.size, t.item, t.record, optional=True)
        if isinstance(a, str):
            simple = {"int": "int32", "long": "int64", "float": "float32", "double": "float64",
                      "boolean": "bool", "string": "string", "bytes": "bytes"}
            if a in simple:
                return Type(Kind(simple[a]))
            if a in named:
                return named[a]
            raise SchemaError(where, f"Avro type {a!r} has no equivalent")
        if isinstance(a, dict):
            kind = a.get("type")
            if kind == "fixed":
                t = Type(Kind.FIXED, size=int(a["size"]))
                named[a["name"]] = t
                return t
            if kind == "array":
                return Type(Kind.LIST, item=typ(a["items"], where + "[]"))
            if kind == "record":
                t = Type(Kind.RECORD, record=rec(a, where))
                named[a["name"]] = t
                return t
            if isinstance(kind, (str, list, dict)) and kind not in ("map", "enum"):
                return typ(kind, where)
        raise SchemaError(where, f"Avro type {a!r} has no equivalent")

    def rec(a: dict[str, Any], where: str) -> RecordSchema:
        fields = tuple(Field(f["name"], typ(f["type"], f"{where}.{f['name']}" if where else f["name"]))
                       for f in a.get("fields", []))
        if not fields:
            raise SchemaError(where, "an Avro record with no fields")
        return RecordSchema(a["name"].split(".")[-1], fields)

    if not isinstance(avsc, dict) or avsc.get("type") != "record":
        raise SchemaError(path, "the top level of an .avsc must be a record")
    out = rec(avsc, path)
    return RecordSchema(out.name, out.fields, source=avsc)


def _defaults(avsc: Any) -> dict[str, set[str]]:
    """Record name -> its fields that have a ``default`` in an ``.avsc`` (fastavro writes it for them)."""
    out: dict[str, set[str]] = {}

    def walk(a: Any) -> None:
        if isinstance(a, list):
            for x in a:
                walk(x)
        elif isinstance(a, dict):
            if a.get("type") == "record":
                out[str(a.get("name", "")).split(".")[-1]] = {f["name"] for f in a.get("fields", ())
                                                              if "default" in f}
                for f in a.get("fields", ()):
                    walk(f.get("type"))
            else:
                walk(a.get("type"))
                walk(a.get("items"))

    walk(avsc)
    return out


def codec(schema: RecordSchema, framed: bool = False, schema_id: int | None = None
          ) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(encode, decode) for records of ``schema`` (its ``.avsc`` when it was read from one)."""
    import fastavro

    avsc = schema.source if isinstance(schema.source, dict) else avro_schema(schema)
    parsed = fastavro.parse_schema(avsc)
    writer_schema = fastavro.parse_schema({"type": "array", "items": parsed}) if framed else parsed
    write = fastavro.schemaless_writer
    read = fastavro.schemaless_reader
    BytesIO = io.BytesIO
    prefix = b"" if schema_id is None else b"\x00" + int(schema_id).to_bytes(4, "big")
    skip = len(prefix)
    list_schema = fastavro.parse_schema({"type": "array", "items": parsed})
    record_name = parsed["name"] if isinstance(parsed, dict) else schema.name  # a record's is a dict

    # fastavro writes what does not fit as some other value (1.5 for an int as 1, None for a bool as
    # false, an out-of-range int32 as a long): each record is checked first, in C
    validate = validator(schema, may_be_absent=_defaults(avsc) if schema.source is avsc else None)

    def written(value: Any) -> bytes:
        buf = BytesIO()
        buf.write(prefix)
        write(buf, list_schema if type(value) is list else parsed, value)
        return buf.getvalue()

    encode = checked(validate, written)  # numpy arrays and tuples as lists, only when refused

    def decode(data: bytes) -> Any:
        if skip:
            if data[:1] != b"\x00" or len(data) < 5:
                raise StageError("deserialize", "avro", "not in the Confluent framing (magic byte 0 + schema id)")
            got = int.from_bytes(data[1:5], "big")
            if got != schema_id:
                raise StageError("deserialize", "avro", f"schema id {got}, expected {schema_id}")
        buf = BytesIO(data)
        buf.seek(skip)
        try:
            value = read(buf, writer_schema, None)
        except (EOFError, ValueError, IndexError, UnicodeDecodeError, TypeError) as exc:
            raise StageError("deserialize", "avro", f"not a {record_name} record ({type(exc).__name__}: {exc})") \
                from None
        if buf.tell() != len(data):
            raise StageError("deserialize", "avro", f"{len(data) - buf.tell()} trailing bytes after the record")
        return value

    return encode, decode
