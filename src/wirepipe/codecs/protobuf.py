"""Protobuf: messages built at run time from the typed schema, or the user's own descriptors.

From a ``RecordSchema`` wirepipe writes a proto3 ``FileDescriptorProto`` with
``descriptor_pb2`` and asks the official runtime (``message_factory``) for the class, so no
``protoc`` is needed and the bytes are the runtime's own. Field numbers are 1..n in schema
order; the mapping (the ``.proto`` a peer would write, see ``to_proto_text``):

int32 -> int32, int64 -> int64, uint32 -> uint32, float32 -> float, float64 -> double,
bool -> bool, string -> string, bytes and bytes[N] -> bytes (N checked by wirepipe at any depth,
on encode and on decode), list<T> -> repeated T (packed for numbers, proto3's default),
record -> a nested message, T? -> proto3 ``optional T``. A list of lists or a list of optionals
has no protobuf form, nor two fields whose JSON (lowerCamelCase) names are one (``d`` and ``d_``,
``a_b`` and ``aB``: protoc refuses them), and is refused when the format is built.

The runtime writes some values that do not fit as others (None as "unset", read back as 0; True
for an int32; bytes for a string; bytes[N] of any length), so a record of wirepipe's own schema
is checked before it is written (``codecs/checks.py``'s ``validator``, in C; the repeated numbers are left
to the runtime, which checks them) and a misfit is refused with its field path; on decode, the
bytes[N] lengths of a peer's message are checked. A message of your own (``.proto``, ``.desc``,
class) keeps proto3's rules: an absent field is its default.

A user's own message comes as a ``.proto`` source (``schema: points.proto``, compiled by protoc from
the ``proto`` extra: ``codecs/protoc.py``), a generated class (``schema: my_pb2:Point``) or a
``FileDescriptorSet`` file (``protoc --descriptor_set_out=points.desc``, or ``buf build -o``), with
``message:`` (or ``FILE#Message``) naming the type when the file declares several: ``Point`` inside
the file's package, or the full name ``geo.Point``. The user's message then gives the typed
schema every other format uses; a message whose fields that schema cannot express (a map,
``uint64``/``fixed64``) is refused, naming the field.

A framed message (several records) is ``message Records { repeated Record records = 1; }``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..core.errors import StageError
from ..core.limits import MAX_SCHEMA_FILE, read_at_most
from ..schema import Field, Kind, RecordSchema, SchemaError, Type, explain
from .checks import checked, validator
from .varints import read_varint, varint

_SCALARS = {"int32": "TYPE_INT32", "int64": "TYPE_INT64", "uint32": "TYPE_UINT32", "float32": "TYPE_FLOAT",
            "float64": "TYPE_DOUBLE", "bool": "TYPE_BOOL", "string": "TYPE_STRING", "bytes": "TYPE_BYTES",
            "fixed": "TYPE_BYTES"}
_PROTO_NAMES = {"int32": "int32", "int64": "int64", "uint32": "uint32", "float32": "float", "float64": "double",
                "bool": "bool", "string": "string", "bytes": "bytes", "fixed": "bytes"}


def _message_proto(schema: RecordSchema, path: str) -> Any:
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FieldDescriptorProto
    msg = descriptor_pb2.DescriptorProto(name=schema.name)
    nested_names: set[str] = set()
    json_names: dict[str, str] = {}
    for number, f in enumerate(schema.fields, start=1):
        where = f"{path}.{f.name}" if path else f.name
        other = json_names.setdefault(json_name(f.name), f.name)
        if other != f.name:
            raise SchemaError(where, f"has no protobuf form next to field {other}: protobuf refuses two fields "
                                     f"whose JSON (lowerCamelCase) names are the same, {json_name(f.name)!r}")
        t = f.type
        label = fd.LABEL_OPTIONAL
        if t.kind == Kind.LIST:
            item = t.item
            assert item is not None
            if item.kind == Kind.LIST or item.optional:
                raise SchemaError(where, f"{t} has no protobuf form (repeated fields hold neither lists nor nulls)")
            if t.optional:
                raise SchemaError(where, f"{t} has no protobuf form (a repeated field cannot be optional)")
            label = fd.LABEL_REPEATED
            t = item
        field = msg.field.add(name=f.name, number=number, label=label)
        if t.kind == Kind.RECORD:
            rec = t.record
            assert rec is not None
            nested = _message_proto(rec, where)
            base = nested.name
            while nested.name in nested_names:
                nested.name = f"{base}{len(nested_names)}"
            nested_names.add(nested.name)
            msg.nested_type.append(nested)
            field.type = fd.TYPE_MESSAGE
            field.type_name = nested.name
        else:
            field.type = getattr(fd, _SCALARS[t.kind])
        if f.type.optional and f.type.kind != Kind.LIST:
            field.proto3_optional = True
            field.oneof_index = len(msg.oneof_decl)
            msg.oneof_decl.add(name=f"_{f.name}")
    return msg


def message_class(schema: RecordSchema, package: str = "wirepipe.generated") -> Any:
    """The runtime message class for ``schema`` (proto3, fields numbered 1..n)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.{schema.name}.proto", package=package,
                                              syntax="proto3")
    file.message_type.append(_message_proto(schema, ""))
    records = file.message_type.add(name=f"{schema.name}Records")
    records.field.add(name="records", number=1, label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                      type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, type_name=schema.name)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{schema.name}"))


def to_proto_text(schema: RecordSchema) -> str:
    """The ``.proto`` source a peer compiles to read wirepipe's messages for ``schema``."""
    lines = ['syntax = "proto3";', ""]

    def message(s: RecordSchema, indent: str) -> None:
        lines.append(f"{indent}message {s.name} {{")
        for number, f in enumerate(s.fields, start=1):
            t = f.type
            prefix = ""
            if t.kind == Kind.LIST:
                prefix, t = "repeated ", t.item  # type: ignore[assignment]
            elif t.optional:
                prefix = "optional "
            if t.kind == Kind.RECORD:
                message(t.record, indent + "  ")  # type: ignore[arg-type]
                tname = t.record.name  # type: ignore[union-attr]
            else:
                tname = _PROTO_NAMES[t.kind]
            lines.append(f"{indent}  {prefix}{tname} {f.name} = {number};")
        lines.append(f"{indent}}}")

    message(schema, "")
    return "\n".join(lines) + "\n"


# --- descriptors the user brings -------------------------------------------------------------------


def schema_of_message(descriptor: Any, path: str = "") -> RecordSchema:
    """A ``RecordSchema`` from a protobuf message descriptor (so every format can use it)."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    kinds = {FD.TYPE_INT32: "int32", FD.TYPE_SINT32: "int32", FD.TYPE_SFIXED32: "int32", FD.TYPE_INT64: "int64",
             FD.TYPE_SINT64: "int64", FD.TYPE_SFIXED64: "int64", FD.TYPE_UINT32: "uint32", FD.TYPE_FIXED32: "uint32",
             FD.TYPE_FLOAT: "float32", FD.TYPE_DOUBLE: "float64", FD.TYPE_BOOL: "bool", FD.TYPE_STRING: "string",
             FD.TYPE_BYTES: "bytes", FD.TYPE_ENUM: "int32"}
    fields = []
    for f in descriptor.fields:
        where = f"{path}.{f.name}" if path else f.name
        if f.type == FD.TYPE_MESSAGE:
            if f.message_type.GetOptions().map_entry:
                raise SchemaError(where, "protobuf maps have no equivalent in the schema language")
            t = Type(Kind.RECORD, record=schema_of_message(f.message_type, where))
        elif f.type in kinds:
            t = Type(Kind(kinds[f.type]))
        else:
            raise SchemaError(where, f"protobuf type {f.type} (uint64/fixed64/group) has no equivalent")
        repeated = is_repeated(f)
        optional = not repeated and (f.type == FD.TYPE_MESSAGE or f.has_presence)
        if repeated:
            t = Type(Kind.LIST, item=t)
        elif optional:
            t = Type(t.kind, t.size, t.item, t.record, optional=True)
        fields.append(Field(f.name, t))
    return RecordSchema(descriptor.name, tuple(fields), source=descriptor)


def json_name(name: str) -> str:
    """protoc's JSON name of a field: drop each ``_`` and capitalise the letter after it.

    >>> json_name("some_field_name"), json_name("x_1")
    ('someFieldName', 'x1')
    """
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def is_repeated(f: Any) -> bool:
    """Whether a field descriptor is repeated: protobuf >= 6 names it ``is_repeated`` (``label`` is
    deprecated there); older ones have ``label``."""
    flag = getattr(type(f), "is_repeated", None)
    if flag is not None:
        return bool(f.is_repeated)
    return bool(f.label == f.LABEL_REPEATED)


def find_message(pool: Any, files: Any, message: str | None, path: str) -> Any:
    """The descriptor of ``message`` among the messages ``files`` declare: by its full name, or by its
    name inside its package (``Point`` for ``geo.Point``); without a name, the only top-level message."""
    names = [f"{f.package}.{m.name}" if f.package else m.name for f in files for m in f.message_type]
    if not names:
        raise SchemaError("", f"{path} declares no message")
    if message is None:
        if len(names) > 1:
            raise SchemaError("", f"{path} declares {', '.join(names)}: name one with message: (or {path}#Message)")
        message = names[0]
    message = message.lstrip(".")
    for candidate in [message] + [f"{f.package}.{message}" for f in files if f.package]:
        try:
            return pool.FindMessageTypeByName(candidate)
        except KeyError:
            continue
    raise SchemaError("", f"{path} has no message {message!r}: it declares {', '.join(names)}")


def class_from_descriptor_set(data: bytes, message: str | None, path: str, own_file_only: bool = True) -> Any:
    """The message class named ``message`` in a serialized ``FileDescriptorSet``: among the last file's
    messages (protoc writes the file it compiled last, after its imports) or, with
    ``own_file_only=False``, among every file's (a ``.desc`` the user compiled from several)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fds = descriptor_pb2.FileDescriptorSet()
    try:
        fds.ParseFromString(data)
    except Exception as exc:
        raise SchemaError("", f"{path} is not a protobuf FileDescriptorSet ({exc})") from None
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        try:
            pool.Add(f)
        except Exception as exc:  # the runtime's own checks: name the file
            raise SchemaError("", f"{path}: the protobuf runtime refuses {f.name}: {exc}") from None
    files = list(fds.file)
    return message_factory.GetMessageClass(find_message(pool, files[-1:] if own_file_only else files, message, path))


def load_descriptor_set(path: str, message: str | None) -> Any:
    """The message class named ``message`` in a ``FileDescriptorSet`` file."""
    data = read_at_most(path, MAX_SCHEMA_FILE, "a descriptor set")
    return class_from_descriptor_set(data, message, path, own_file_only=False)


# --- encode and decode -----------------------------------------------------------------------------


def _to_dict(descriptor: Any) -> Callable[[Any], dict[str, Any]]:
    """message -> dict (every field; unset optional fields None), built once per descriptor."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    plain: list[str] = []
    special: list[tuple[str, Callable[[Any], Any]]] = []
    for f in descriptor.fields:
        name = f.name
        repeated = is_repeated(f)
        if f.type == FD.TYPE_MESSAGE:
            sub = _to_dict(f.message_type)
            special.append((name, partial(_messages if repeated else _message_or_none, name, sub)))
        elif repeated:
            special.append((name, partial(_values, name)))
        elif f.has_presence:
            special.append((name, partial(_value_or_none, name)))
        else:
            plain.append(name)
    if not special and len(plain) == 2:
        a, b = plain
        return lambda m: {a: getattr(m, a), b: getattr(m, b)}
    order = [f.name for f in descriptor.fields]
    fns = dict(special)

    def convert(m: Any) -> dict[str, Any]:
        return {n: fns[n](m) if n in fns else getattr(m, n) for n in order}

    return convert


# The field readers of ``_to_dict`` (bound to a field name, and a sub-message's converter, with partial).
def _messages(name: str, convert: Callable[[Any], Any], m: Any) -> list[Any]:
    return [convert(x) for x in getattr(m, name)]


def _message_or_none(name: str, convert: Callable[[Any], Any], m: Any) -> Any:
    return convert(getattr(m, name)) if m.HasField(name) else None


def _values(name: str, m: Any) -> list[Any]:
    return list(getattr(m, name))


def _value_or_none(name: str, m: Any) -> Any:
    return getattr(m, name) if m.HasField(name) else None


def _fixed_test(t: Type) -> Callable[[Any], bool] | None:
    """A yes/no test that every bytes[N] value inside ``t`` holds its N bytes, or None when ``t`` has
    no bytes[N]: protobuf's bytes take any length, so a peer's message may carry a bytes[N] field of
    another length, and the decoder checks N itself, at every depth. (On encode ``validator`` checks
    it with the rest.)

    Built once per schema, and only down the branches that hold a bytes[N]: a list of bytes[N] is
    one ``map`` over the lengths, in C; a record looks at its bytes[N] fields and at the fields
    that hold one, nothing else (measured: ~0.7 us a ``transaction`` record, against ~8 us for
    protobuf's decode; loops, not ``all()`` over a generator, which took twice as long). It says
    only yes or no: the reason with the field path is looked for (``schema.explain``) when it says
    no. A record read as None (an unset sub-message) has nothing to check.
    """
    if not t.contains(Kind.FIXED):
        return None
    if t.kind == Kind.FIXED:
        size = t.size
        return (lambda v: v is None or len(v) == size) if t.optional else (lambda v: len(v) == size)
    if t.kind == Kind.LIST:
        item = t.item
        assert item is not None
        each = _fixed_test(item)
        assert each is not None
        if item.kind == Kind.FIXED and not item.optional:
            differs = item.size.__ne__

            def items(v: Any) -> bool:
                return not any(map(differs, map(len, v)))
        else:
            def items(v: Any) -> bool:
                return all(map(each, v))

        return (lambda v: v is None or items(v)) if t.optional else items
    rec = t.record
    assert rec is not None
    fixed = [(f.name, f.type.size) for f in rec.fields if f.type.kind == Kind.FIXED and not f.type.optional]
    maybe = [(f.name, f.type.size) for f in rec.fields if f.type.kind == Kind.FIXED and f.type.optional]
    others = [(f.name, test) for f in rec.fields if f.type.kind != Kind.FIXED and (test := _fixed_test(f.type))]

    def record(v: Any) -> bool:
        if v is None:
            return True
        for name, size in fixed:
            if len(v[name]) != size:
                return False
        get = v.get
        for name, size in maybe:
            x = get(name)
            if x is not None and len(x) != size:
                return False
        for name, test in others:  # noqa: SIM110 - a loop: all() over a generator takes twice as long
            if not test(get(name)):
                return False
        return True

    return record


_WRONG_LENGTH = ValueError("a bytes[N] value of another length")  # explain's fallback: never shown


def codec(schema: RecordSchema, framed: bool = False) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(encode, decode) for records of ``schema``; the class comes from ``schema.source`` when the
    schema was read from a protobuf descriptor, else it is built from the schema."""
    from google.protobuf.message import DecodeError

    source = schema.source
    validate = None
    if source is not None and hasattr(source, "fields_by_name"):
        from google.protobuf import message_factory

        cls = message_factory.GetMessageClass(source)
    elif source is not None and hasattr(source, "DESCRIPTOR"):
        cls = source
    else:  # wirepipe's own class, from the schema (a typed schema, or one read from an .avsc)
        cls = message_class(schema)
        validate = validator(schema, numeric_lists=False)
    to_dict = _to_dict(cls.DESCRIPTOR)
    from_string = cls.FromString
    # The runtime writes None as "unset" (read back as 0), True for an int32, 1 for a bool, bytes for
    # a string, and bytes[N] of any length: a record for a class built from the schema is checked first,
    # in C (its repeated numbers are left to the runtime, which checks them). A message of the user's
    # own (.proto, .desc, class) keeps proto3's rules: an absent field is its default.
    fixed = _fixed_test(Type(Kind.RECORD, record=schema))

    def write(value: Any) -> bytes:
        if type(value) is list:
            msgs = [cls(**r) for r in value]
            return b"".join(_length_delimited(m.SerializeToString()) for m in msgs)
        return cls(**value).SerializeToString()

    def read(data: bytes) -> Any:
        try:
            return to_dict(from_string(data))
        except DecodeError as exc:
            raise StageError("deserialize", "protobuf", f"not a {cls.DESCRIPTOR.name} message ({exc})") from None

    def checked_read(data: bytes) -> Any:
        try:
            value = to_dict(from_string(data))
        except DecodeError as exc:
            raise StageError("deserialize", "protobuf", f"not a {cls.DESCRIPTOR.name} message ({exc})") from None
        if not fixed(value):  # type: ignore[misc]
            raise StageError("deserialize", "protobuf", explain(schema, value, _WRONG_LENGTH))
        return value

    # numpy arrays where the schema has lists of records or strings are taken as lists, only when refused
    encode = write if validate is None else checked(validate, write)
    if not framed:
        return encode, read if fixed is None else checked_read

    def decode_framed(data: bytes) -> Any:
        out = []
        pos, n = 0, len(data)
        while pos < n:
            if data[pos] != 0x0A:  # field 1, wire type 2
                raise StageError("deserialize", "protobuf", f"expected field 1 (records) at byte {pos}")
            size, pos = read_varint(data, pos + 1, 10, "protobuf")
            if pos + size > n:
                raise StageError("deserialize", "protobuf", "truncated record")
            out.append(read(data[pos:pos + size]))
            pos += size
        if fixed is not None and not all(map(fixed, out)):
            raise StageError("deserialize", "protobuf", explain(schema, out, _WRONG_LENGTH))
        return out

    return encode, decode_framed


def _length_delimited(body: bytes) -> bytes:
    return b"\x0a" + varint(len(body)) + body
