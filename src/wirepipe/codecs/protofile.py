"""Protobuf ``.proto`` source files, read without protoc.

Why: a user's protobuf schema usually is a ``.proto``; making them install protoc and compile a
descriptor set first is a step wirepipe can take for them. This parser follows protoc's own
(``compiler/parser.cc``) and writes the ``FileDescriptorProto`` protoc writes: the same synthetic
``_name`` oneofs for proto3 ``optional``, the same nested ``XxxEntry`` messages (``map_entry``) for
``map<K, V>``, the same ``json_name``\\ s and spellings of default values, type names resolved by
protobuf's scoping rules to ``.package.Message``. The official runtime (``descriptor_pool`` and
``message_factory``) then makes the message class, so the bytes are the runtime's own. The tests
compare the descriptors with protoc's (from ``grpcio-tools``) field for field.

Supported, in ``syntax = "proto2"`` and ``"proto3"`` (no ``syntax`` line means proto2, as protoc):
``package``; ``import`` (also ``public``/``weak``) of other ``.proto`` files, looked up beside the
importing file, then in ``include`` folders, then in the root folder of the first file (see
``load``); ``google/protobuf/*.proto`` come from the runtime's own pool when not on disk; ``option`` at every level, standard options
kept in the descriptor as protoc keeps them (``packed``, ``deprecated``, ``allow_alias``,
``java_package`` ...) and custom ``(my.option)`` ones parsed and ignored; ``//`` and ``/* */``
comments; messages, nested messages and enums; enums with ``allow_alias`` and negative values;
every scalar type; ``repeated``, ``optional``, ``required`` (proto2); ``map<K, V>``; ``oneof``;
``reserved`` numbers, ranges (``to max``) and names; ``extensions`` ranges; field options
``[packed = false, deprecated = true, json_name = "..."]`` and ``default`` (proto2); ``service`` and
``rpc``, ``extend`` blocks (kept in the descriptor, as protoc keeps them).

Refused with a ``SchemaError`` naming ``file:line:column`` and what was found: groups, editions
(``edition = "2023"``), syntax errors, unknown or not-imported types, duplicate field numbers or
names, field numbers out of range, numbers or names a ``reserved`` line holds, an enum number used
twice without ``allow_alias``, missing imports, and what protoc itself refuses in proto3
(``required``, defaults, a first enum value other than zero). What the runtime refuses when it
builds the classes (two messages of one name ...) is a ``SchemaError`` naming the file.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf import descriptor_pb2

from ..schema import SchemaError

FD = descriptor_pb2.FieldDescriptorProto
SCALARS = {"double": FD.TYPE_DOUBLE, "float": FD.TYPE_FLOAT, "int64": FD.TYPE_INT64, "uint64": FD.TYPE_UINT64,
           "int32": FD.TYPE_INT32, "fixed64": FD.TYPE_FIXED64, "fixed32": FD.TYPE_FIXED32, "bool": FD.TYPE_BOOL,
           "string": FD.TYPE_STRING, "bytes": FD.TYPE_BYTES, "uint32": FD.TYPE_UINT32,
           "sfixed32": FD.TYPE_SFIXED32, "sfixed64": FD.TYPE_SFIXED64, "sint32": FD.TYPE_SINT32,
           "sint64": FD.TYPE_SINT64}
_INT_RANGES = {FD.TYPE_INT32: 32, FD.TYPE_SINT32: 32, FD.TYPE_SFIXED32: 32, FD.TYPE_INT64: 64,
               FD.TYPE_SINT64: 64, FD.TYPE_SFIXED64: 64, FD.TYPE_UINT32: -32, FD.TYPE_FIXED32: -32,
               FD.TYPE_UINT64: -64, FD.TYPE_FIXED64: -64}  # bits; negative: unsigned
_MAP_KEYS = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
             "sfixed64", "bool", "string"}
MAX_FIELD_NUMBER = 2**29 - 1
_IMPLEMENTATION_RESERVED = range(19000, 20000)


# --- tokens ---------------------------------------------------------------------------------------


class Token(NamedTuple):
    kind: str  # ident, int, float, string, symbol, eof
    text: str  # the source text (a string's is its quoted spelling)
    line: int
    col: int
    value: Any = None  # int for int, float for float, bytes for string

    def shown(self) -> str:
        return "end of file" if self.kind == "eof" else repr(self.text)


_SCAN = re.compile(r"""
    (?P<space>[ \t\r\f\v]+|\n)
  | (?P<comment>//[^\n]*)
  | (?P<block>/\*)
  | (?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>0[xX][0-9A-Fa-f]+|\d+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>["'])
  | (?P<symbol>[{}\[\]()<>;,=.\-+:/])
""", re.VERBOSE)
_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34, "?": 63}


def tokenize(text: str, where: str) -> list[Token]:
    """The tokens of a ``.proto`` source (comments dropped); ``where`` names the file in errors."""
    tokens: list[Token] = []
    value: Any
    pos, line, line_start, n = 0, 1, 0, len(text)
    while pos < n:
        m = _SCAN.match(text, pos)
        col = pos - line_start + 1
        if m is None:
            raise SchemaError("", f"{where}:{line}:{col}: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        end = m.end()
        if kind == "space":
            if text[pos] == "\n":
                line, line_start = line + 1, end
        elif kind == "block":
            close = text.find("*/", end)
            if close < 0:
                raise SchemaError("", f"{where}:{line}:{col}: comment /* ... not closed before the end of the file")
            end = close + 2
            newlines = text.count("\n", pos, end)
            if newlines:
                line, line_start = line + newlines, text.rindex("\n", pos, end) + 1
        elif kind == "string":
            value, end = _string(text, pos, f"{where}:{line}:{col}")
            tokens.append(Token("string", text[pos:end], line, col, value))
        elif kind in ("int", "float"):
            spelled = m.group()
            if end < n and (text[end].isalnum() or text[end] == "_"):
                raise SchemaError("", f"{where}:{line}:{col}: a number cannot run into {text[end]!r} ({spelled}{text[end]})")
            if kind == "float":
                value = float(spelled)
            elif spelled[:2] in ("0x", "0X"):
                value = int(spelled, 16)
            elif len(spelled) > 1 and spelled[0] == "0":
                if not set(spelled) <= set("01234567"):
                    raise SchemaError("", f"{where}:{line}:{col}: {spelled} is not an octal number")
                value = int(spelled, 8)
            else:
                value = int(spelled)
            tokens.append(Token(kind, spelled, line, col, value))
        elif kind != "comment":
            tokens.append(Token(kind or "", m.group(), line, col))
        pos = end
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


def _string(text: str, start: int, where: str) -> tuple[bytes, int]:
    """A quoted literal at ``start``: its bytes (escapes applied, text as UTF-8) and where it ends."""
    quote = text[start]
    out = bytearray()
    i = start + 1
    while True:
        if i >= len(text) or text[i] == "\n":
            raise SchemaError("", f"{where}: string literal not closed on its line")
        c = text[i]
        if c == quote:
            return bytes(out), i + 1
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = text[i + 1] if i + 1 < len(text) else ""
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "01234567" and e:
            digits = re.match(r"[0-7]{1,3}", text[i + 1:i + 4])
            assert digits is not None
            out.append(int(digits.group(), 8) & 0xFF)
            i += 1 + len(digits.group())
        elif e in "xX" and e:
            digits = re.match(r"[0-9A-Fa-f]{1,2}", text[i + 2:i + 4])
            if digits is None:
                raise SchemaError("", f"{where}: \\x needs hex digits")
            out.append(int(digits.group(), 16))
            i += 2 + len(digits.group())
        elif e in "uU" and e:
            size = 4 if e == "u" else 8
            digits = re.match(f"[0-9A-Fa-f]{{{size}}}", text[i + 2:i + 2 + size])
            if digits is None:
                raise SchemaError("", f"{where}: \\{e} needs {size} hex digits")
            out += chr(int(digits.group(), 16)).encode("utf-8", "surrogatepass")
            i += 2 + size
        else:
            raise SchemaError("", f"{where}: invalid escape \\{e}")


# --- spellings protoc writes ----------------------------------------------------------------------


def json_name(name: str) -> str:
    """protoc's ``ToJsonName``: drop each ``_`` and capitalise the letter after it.

    >>> json_name("some_field_name"), json_name("x_1")
    ('someFieldName', 'x1')
    """
    out: list[str] = []
    upper = False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def map_entry_name(field_name: str) -> str:
    """protoc's ``MapEntryName``: ``tags`` -> ``TagsEntry``, ``by_id`` -> ``ByIdEntry``."""
    out: list[str] = []
    upper = True
    for c in field_name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper() if "a" <= c <= "z" else c)
            upper = False
        else:
            out.append(c)
    return "".join(out) + "Entry"


def _c_escape(data: bytes) -> str:
    """protoc's ``CEscape`` (how a bytes default is written in the descriptor)."""
    named = {10: "\\n", 13: "\\r", 9: "\\t", 34: '\\"', 39: "\\'", 92: "\\\\"}
    return "".join(named.get(b) or (chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}") for b in data)


def _float_text(value: float, single: bool) -> str:
    """protoc's ``SimpleFtoa``/``SimpleDtoa``: %g with the fewest digits that read back the same."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if single:
        exact = struct.unpack("<f", struct.pack("<f", value))[0]
        text = f"{exact:.6g}"
        return text if struct.unpack("<f", struct.pack("<f", float(text)))[0] == exact else f"{exact:.9g}"
    text = f"{value:.15g}"
    return text if float(text) == value else f"{value:.17g}"


def is_repeated(f: Any) -> bool:
    """Whether a field descriptor is repeated: protobuf >= 6 names it ``is_repeated`` (``label`` is
    deprecated there); older ones have ``label``."""
    flag = getattr(type(f), "is_repeated", None)
    if flag is not None:
        return bool(f.is_repeated)
    return bool(f.label == f.LABEL_REPEATED)


# --- the parser -----------------------------------------------------------------------------------


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


@dataclass
class _Ref:
    """A type name waiting to be resolved once every file is read."""

    target: Any  # the descriptor proto that holds the name
    attr: str  # type_name, input_type or output_type
    name: str
    scope: str  # the full name it appears in (protoc's relative_to)
    token: Token
    file: ParsedFile | None = None


@dataclass
class ParsedFile:
    """One ``.proto`` read: its descriptor with names still as written, and the names to resolve."""

    proto: descriptor_pb2.FileDescriptorProto
    path: str  # where it was read from (errors name it)
    refs: list[_Ref] = field(default_factory=list)
    imports: list[Token] = field(default_factory=list)  # the string token of each import, in order


class _Parser:
    def __init__(self, text: str, name: str, where: str) -> None:
        self.where = where
        self.tokens = tokenize(text, where)
        self.i = 0
        self.out = ParsedFile(descriptor_pb2.FileDescriptorProto(name=name), where)
        self.proto3 = False

    # -- token helpers --
    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok.text == text and tok.kind in ("ident", "symbol")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def fail(self, tok: Token, message: str) -> SchemaError:
        return SchemaError("", f"{self.where}:{tok.line}:{tok.col}: {message}")

    def expect(self, text: str, what: str = "") -> Token:
        tok = self.next()
        if tok.text != text or tok.kind not in ("ident", "symbol"):
            raise self.fail(tok, f"expected {what or repr(text)}, found {tok.shown()}")
        return tok

    def ident(self, what: str) -> Token:
        tok = self.next()
        if tok.kind != "ident":
            raise self.fail(tok, f"expected {what}, found {tok.shown()}")
        return tok

    def dotted(self, what: str) -> tuple[str, Token]:
        """``a.b.c`` or ``.a.b.c`` (a leading dot: fully qualified)."""
        first = self.peek()
        text = "." if self.accept(".") else ""
        text += self.ident(what).text
        while self.accept("."):
            text += "." + self.ident(what).text
        return text, first

    def string(self, what: str) -> tuple[bytes, Token]:
        """One string literal, or several in a row (joined, as in C)."""
        tok = self.next()
        if tok.kind != "string":
            raise self.fail(tok, f"expected {what} (a quoted string), found {tok.shown()}")
        value = tok.value
        while self.peek().kind == "string":
            value += self.next().value
        return value, tok

    def text(self, what: str) -> tuple[str, Token]:
        value, tok = self.string(what)
        try:
            return value.decode("utf-8"), tok
        except UnicodeDecodeError:
            raise self.fail(tok, f"{what} is not valid UTF-8") from None

    def integer(self, what: str) -> tuple[int, Token]:
        tok = self.peek()
        sign = -1 if self.accept("-") else 1
        num = self.next()
        if num.kind != "int":
            raise self.fail(num, f"expected {what} (an integer), found {num.shown()}")
        return sign * num.value, tok

    def end(self) -> None:
        self.expect(";", "';'")

    def block(self, what: str) -> Iterator[Token]:
        """The statements of a ``{ ... }`` body: yields at the start of each (empty ``;`` ones skipped)
        and returns after the closing brace."""
        self.expect("{", f"'{{' to open {what}")
        while not self.accept("}"):
            tok = self.peek()
            if tok.kind == "eof":
                raise self.fail(tok, f"{what} not closed: expected '}}'")
            if not self.accept(";"):
                yield tok

    # -- the file --
    def parse(self) -> ParsedFile:
        f = self.out.proto
        if self.at("syntax"):
            self.next()
            self.expect("=")
            syntax, tok = self.text("a syntax")
            if syntax not in ("proto2", "proto3"):
                raise self.fail(tok, f'unknown syntax "{syntax}": allowed "proto2", "proto3"')
            self.end()
            self.proto3 = syntax == "proto3"
            if self.proto3:
                f.syntax = "proto3"
        elif self.at("edition"):
            raise self.fail(self.peek(), "editions (edition = ...) are not supported: use syntax = \"proto2\" or "
                                         "\"proto3\", or compile the file with protoc to a .desc")
        package_token: Token | None = None
        while self.peek().kind != "eof":
            tok = self.peek()
            if self.accept(";"):
                continue
            word = tok.text if tok.kind == "ident" else ""
            if word == "package":
                self.next()
                if package_token is not None:
                    raise self.fail(tok, f"a second package (the first is on line {package_token.line})")
                package_token = tok
                f.package = self.dotted("a package name")[0].lstrip(".")
                self.end()
            elif word == "import":
                self.import_()
            elif word == "option":
                self.option(f.options)
            elif word == "message":
                self.message(f.message_type.add(), f.package)
            elif word == "enum":
                self.enum(f.enum_type.add(), f.package)
            elif word == "service":
                self.service(f)
            elif word == "extend":
                self.extend(f.extension, f.package)
            elif word in ("syntax", "edition"):
                raise self.fail(tok, f"{word} must be the first statement of the file")
            else:
                raise self.fail(tok, f"expected a top-level statement (message, enum, service, import, package, "
                                     f"option, extend), found {tok.shown()}")
        return self.out

    def import_(self) -> None:
        self.next()
        f = self.out.proto
        kind = ""
        if self.at("public") or self.at("weak"):
            kind = self.next().text
        elif self.at("option"):
            raise self.fail(self.peek(), "import option (editions) is not supported")
        path, tok = self.text("an import path")
        self.end()
        index = len(f.dependency)
        f.dependency.append(path)
        self.out.imports.append(tok)
        if kind == "public":
            f.public_dependency.append(index)
        elif kind == "weak":
            f.weak_dependency.append(index)

    # -- options --
    def option(self, options: Any) -> None:
        self.expect("option")
        self.option_body(options)
        self.end()

    def option_body(self, options: Any) -> None:
        """``name = value``: a standard option is set on ``options``; a custom ``(x.y)`` one is read and ignored."""
        tok = self.peek()
        custom = False
        names: list[str] = []
        while True:
            if self.accept("("):
                self.dotted("an option name")
                self.expect(")")
                custom = True
            else:
                names.append(self.ident("an option name").text)
            if not self.accept("."):
                break
        self.expect("=")
        if custom:
            self.value()
            return
        target = options
        for name in names[:-1]:
            fd = target.DESCRIPTOR.fields_by_name.get(name)
            if fd is None or fd.message_type is None:
                raise self.fail(tok, f"option {'.'.join(names)!r} unknown")
            target = getattr(target, name)
        name = names[-1]
        fd = target.DESCRIPTOR.fields_by_name.get(name)
        if fd is None or name in ("uninterpreted_option", "features"):
            known = ", ".join(n for n in target.DESCRIPTOR.fields_by_name if n not in ("uninterpreted_option",
                                                                                       "features"))
            raise self.fail(tok, f"option {'.'.join(names)!r} unknown: allowed {known}, or a custom (name)")
        if fd.GetOptions().retention == descriptor_pb2.FieldOptions.RETENTION_SOURCE:
            self.value()  # protoc leaves source-only options out of the descriptors it writes
            return
        self.set_value(target, fd, names)

    def value(self) -> Token:
        """Any option value (skipped): a scalar, or a ``{...}`` aggregate."""
        tok = self.peek()
        if self.accept("{"):
            depth = 1
            while depth:
                t = self.next()
                if t.kind == "eof":
                    raise self.fail(tok, "option value { ... } not closed")
                depth += {"{": 1, "}": -1}.get(t.text, 0) if t.kind == "symbol" else 0
            return tok
        if self.peek().kind == "string":
            self.string("a value")
            return tok
        self.accept("-")
        t = self.next()
        if t.kind not in ("ident", "int", "float"):
            raise self.fail(t, f"expected an option value, found {t.shown()}")
        return tok

    def set_value(self, target: Any, fd: Any, names: Sequence[str]) -> None:
        from google.protobuf.descriptor import FieldDescriptor as F

        where = ".".join(names)
        tok = self.peek()
        if fd.cpp_type == F.CPPTYPE_MESSAGE:
            start = self.i
            self.value()
            from google.protobuf import text_format

            body = " ".join(t.text for t in self.tokens[start + 1:self.i - 1])
            sub = getattr(target, fd.name)
            try:
                text_format.Merge(body, sub.add() if is_repeated(fd) else sub)
            except text_format.ParseError as exc:
                raise self.fail(tok, f"option {where}: {exc}") from None
            return
        if fd.cpp_type == F.CPPTYPE_STRING:
            raw, tok = self.string(f"option {where}")
            value: Any = raw if fd.type == F.TYPE_BYTES else raw.decode("utf-8", "replace")
        elif fd.cpp_type == F.CPPTYPE_BOOL:
            t = self.ident(f"true or false for option {where}")
            if t.text not in ("true", "false"):
                raise self.fail(t, f"option {where} takes true or false, found {t.shown()}")
            value = t.text == "true"
        elif fd.cpp_type == F.CPPTYPE_ENUM:
            t = self.ident(f"a value for option {where}")
            ev = fd.enum_type.values_by_name.get(t.text)
            if ev is None:
                raise self.fail(t, f"option {where} takes {', '.join(fd.enum_type.values_by_name)}, found {t.shown()}")
            value = ev.number
        elif fd.cpp_type in (F.CPPTYPE_FLOAT, F.CPPTYPE_DOUBLE):
            value = self.number(f"option {where}")
        else:
            value, tok = self.integer(f"option {where}")
        try:
            if is_repeated(fd):
                getattr(target, fd.name).append(value)
            else:
                setattr(target, fd.name, value)
        except (ValueError, TypeError) as exc:
            raise self.fail(tok, f"option {where}: {exc}") from None

    def number(self, what: str) -> float:
        sign = -1.0 if self.accept("-") else 1.0
        t = self.next()
        if t.kind in ("int", "float"):
            return sign * float(t.value)
        if t.kind == "ident" and t.text in ("inf", "nan"):
            return sign * float(t.text)
        raise self.fail(t, f"expected a number for {what}, found {t.shown()}")

    # -- messages --
    def message(self, msg: descriptor_pb2.DescriptorProto, parent: str) -> None:
        self.expect("message")
        msg.name = self.ident("a message name").text
        full = _join(parent, msg.name)
        numbers: dict[int, tuple[str, Token]] = {}
        for tok in self.block(f"message {msg.name}"):
            word = tok.text if tok.kind == "ident" else ""
            if word == "message":
                self.message(msg.nested_type.add(), full)
            elif word == "enum":
                self.enum(msg.enum_type.add(), full)
            elif word == "option":
                self.option(msg.options)
            elif word == "oneof":
                self.oneof(msg, full, numbers)
            elif word == "reserved":
                self.reserved(msg, 1, MAX_FIELD_NUMBER, exclusive=True)
            elif word == "extensions":
                self.extensions(msg)
            elif word == "extend":
                self.extend(msg.extension, full)
            else:
                self.field(msg, full, numbers, None)
        self.check_reserved(msg, [(number, name, tok) for number, (name, tok) in numbers.items()], "field",
                            exclusive=True)
        self.synthetic_oneofs(msg)

    def check_reserved(self, target: Any, used: list[tuple[int, str, Token]], what: str, exclusive: bool) -> None:
        """No field (or enum value) may take a number or name its message (or enum) reserves."""
        for number, name, tok in used:
            for r in target.reserved_range:
                if r.start <= number < r.end + (0 if exclusive else 1):
                    last = r.end - 1 if exclusive else r.end
                    raise self.fail(tok, f"{what} {name} = {number}: {number} is reserved in {target.name} "
                                         f"({r.start} to {last})")
            if name in target.reserved_name:
                raise self.fail(tok, f"{what} {name}: the name is reserved in {target.name}")

    def field(self, msg: descriptor_pb2.DescriptorProto, scope: str, numbers: dict[int, tuple[str, Token]],
              oneof: int | None, into: Any = None) -> None:
        """One field of ``msg`` (added to ``into`` instead for the fields of an ``extend`` block)."""
        tok = self.peek()
        label = FD.LABEL_OPTIONAL
        proto3_optional = False
        word = tok.text if tok.kind == "ident" else ""
        if word in ("optional", "repeated", "required") and oneof is None:
            self.next()
            if word == "required" and self.proto3:
                raise self.fail(tok, "required fields are not allowed in proto3")
            label = {"optional": FD.LABEL_OPTIONAL, "repeated": FD.LABEL_REPEATED,
                     "required": FD.LABEL_REQUIRED}[word]
            proto3_optional = word == "optional" and self.proto3
        elif word in ("optional", "repeated", "required"):
            raise self.fail(tok, "fields in a oneof take no label (optional, repeated, required)")
        elif not self.proto3 and oneof is None and word != "map":
            raise self.fail(tok, f'expected "required", "optional", or "repeated" (proto2), found {tok.shown()}')
        type_tok = self.peek()
        if type_tok.text == "group" and type_tok.kind == "ident":
            raise self.fail(type_tok, "groups are not supported: declare a nested message and a field of its type")
        if type_tok.text == "map" and type_tok.kind == "ident" and self.peek(1).text == "<":
            if into is not None:
                raise self.fail(type_tok, "map fields cannot be extensions")
            self.map_field(msg, scope, numbers, oneof, label != FD.LABEL_OPTIONAL or word == "optional")
            return
        f = (msg.field if into is None else into).add(label=label)
        type_name, type_tok = self.dotted("a field type")
        name_tok = self.ident("a field name")
        f.name = name_tok.text
        if type_name in SCALARS:
            f.type = SCALARS[type_name]
        else:
            self.out.refs.append(_Ref(f, "type_name", type_name, _join(scope, f.name), type_tok))
        self.expect("=", "'=' and the field number")
        number, num_tok = self.integer("a field number")
        self.check_number(f.name, number, num_tok, msg.name, numbers)
        f.number = number
        f.json_name = json_name(f.name)
        if proto3_optional:
            f.proto3_optional = True
        if oneof is not None:
            f.oneof_index = oneof
        if self.accept("["):
            self.field_options(f, type_name)
        self.end()

    def map_field(self, msg: descriptor_pb2.DescriptorProto, scope: str, numbers: dict[int, tuple[str, Token]],
                  oneof: int | None, labelled: bool) -> None:
        tok = self.next()
        if labelled:
            raise self.fail(tok, "map fields take no label (optional, repeated, required)")
        if oneof is not None:
            raise self.fail(tok, "map fields are not allowed in a oneof")
        self.expect("<")
        key, key_tok = self.dotted("a map key type")
        if key not in _MAP_KEYS:
            raise self.fail(key_tok, f"map key type {key!r} is not allowed: use an integer type, bool or string")
        self.expect(",", "',' between the map key and value types")
        value, value_tok = self.dotted("a map value type")
        self.expect(">")
        name_tok = self.ident("a field name")
        self.expect("=", "'=' and the field number")
        number, num_tok = self.integer("a field number")
        self.check_number(name_tok.text, number, num_tok, msg.name, numbers)
        entry_name = map_entry_name(name_tok.text)
        f = msg.field.add(name=name_tok.text, number=number, label=FD.LABEL_REPEATED, type=FD.TYPE_MESSAGE,
                          type_name=entry_name, json_name=json_name(name_tok.text))
        self.out.refs.append(_Ref(f, "type_name", entry_name, f"{scope}.{f.name}", name_tok))
        entry = msg.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, label=FD.LABEL_OPTIONAL, type=SCALARS[key], json_name="key")
        v = entry.field.add(name="value", number=2, label=FD.LABEL_OPTIONAL, json_name="value")
        if value in SCALARS:
            v.type = SCALARS[value]
        else:
            self.out.refs.append(_Ref(v, "type_name", value, f"{scope}.{entry_name}.value", value_tok))
        if self.accept("["):
            self.field_options(f, "map")
        self.end()

    def check_number(self, name: str, number: int, tok: Token, message: str,
                     numbers: dict[int, tuple[str, Token]]) -> None:
        if not 1 <= number <= MAX_FIELD_NUMBER:
            raise self.fail(tok, f"field {name} = {number}: field numbers are 1..{MAX_FIELD_NUMBER}")
        if number in _IMPLEMENTATION_RESERVED:
            raise self.fail(tok, f"field {name} = {number}: numbers 19000..19999 are reserved for protobuf itself")
        if number in numbers:
            other, at = numbers[number]
            raise self.fail(tok, f"field {name} = {number}: number {number} is already used by {other} "
                                 f"(line {at.line}) in message {message}")
        for other, _ in numbers.values():
            if other == name:
                raise self.fail(tok, f"field {name} is declared twice in message {message}")
        numbers[number] = (name, tok)

    def field_options(self, f: descriptor_pb2.FieldDescriptorProto, type_name: str) -> None:
        """``[name = value, ...]``: ``default`` and ``json_name`` are fields of the descriptor, the rest options."""
        while True:
            tok = self.peek()
            if self.at("default") and self.peek(1).text == "=":
                self.next()
                self.next()
                if self.proto3:
                    raise self.fail(tok, "default values are not allowed in proto3")
                if f.HasField("default_value"):
                    raise self.fail(tok, f"field {f.name} has two defaults")
                f.default_value = self.default(f, type_name)
            elif self.at("json_name") and self.peek(1).text == "=":
                self.next()
                self.next()
                f.json_name = self.text("a json_name")[0]
            else:
                self.option_body(f.options)
            if self.accept("]"):
                return
            self.expect(",", "',' or ']'")

    def default(self, f: descriptor_pb2.FieldDescriptorProto, type_name: str) -> str:
        """The default as protoc writes it in the descriptor."""
        tok = self.peek()
        if f.label == FD.LABEL_REPEATED:
            raise self.fail(tok, "repeated fields cannot have a default value")
        t = SCALARS.get(type_name)
        if t is None:  # an enum (a message default is refused when types are resolved)
            return self.ident("an enum value name").text
        if t in _INT_RANGES:
            value, _ = self.integer(f"the default of {f.name}")
            bits = _INT_RANGES[t]
            lo, hi = (0, 2 ** -bits - 1) if bits < 0 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            if not lo <= value <= hi:
                raise self.fail(tok, f"default {value} is out of range for {type_name} ({lo}..{hi})")
            return str(value)
        if t in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
            return _float_text(self.number(f"the default of {f.name}"), t == FD.TYPE_FLOAT)
        if t == FD.TYPE_BOOL:
            b = self.ident("true or false")
            if b.text not in ("true", "false"):
                raise self.fail(b, f"a bool default is true or false, found {b.shown()}")
            return b.text
        if t == FD.TYPE_STRING:
            return self.text(f"the default of {f.name}")[0]
        return _c_escape(self.string(f"the default of {f.name}")[0])

    def synthetic_oneofs(self, msg: descriptor_pb2.DescriptorProto) -> None:
        """protoc's ``GenerateSyntheticOneofs``: one ``_name`` oneof per proto3 ``optional`` field."""
        names = {f.name for f in msg.field} | {o.name for o in msg.oneof_decl}
        for f in msg.field:
            if f.proto3_optional:
                name = f.name if f.name.startswith("_") else "_" + f.name
                while name in names:
                    name = "X" + name
                names.add(name)
                f.oneof_index = len(msg.oneof_decl)
                msg.oneof_decl.add(name=name)

    def oneof(self, msg: descriptor_pb2.DescriptorProto, scope: str, numbers: dict[int, tuple[str, Token]]) -> None:
        self.expect("oneof")
        index = len(msg.oneof_decl)
        decl = msg.oneof_decl.add(name=self.ident("a oneof name").text)
        start = len(msg.field)
        for _ in self.block(f"oneof {decl.name}"):
            if self.at("option"):
                self.option(decl.options)
            else:
                self.field(msg, scope, numbers, index)
        if len(msg.field) == start:
            raise self.fail(self.tokens[self.i - 1], f"oneof {decl.name} has no fields")

    def reserved(self, target: Any, min_number: int, max_number: int, exclusive: bool) -> None:
        """``reserved 2, 15, 9 to 11, 40 to max;`` or ``reserved "foo", "bar";`` (message or enum)."""
        self.expect("reserved")
        if self.peek().kind == "string":
            while True:
                target.reserved_name.append(self.text("a reserved name")[0])
                if not self.accept(","):
                    break
        elif self.peek().kind == "ident":
            raise self.fail(self.peek(), "reserved names are quoted strings (\"name\") in proto2 and proto3")
        else:
            for start, end in self.ranges(min_number, max_number, "a reserved number"):
                target.reserved_range.add(start=start, end=end + 1 if exclusive else end)
        self.end()

    def ranges(self, min_number: int, max_number: int, what: str) -> Iterator[tuple[int, int]]:
        while True:
            start, tok = self.integer(what)
            end = start
            if self.accept("to"):
                if self.accept("max"):
                    end = max_number
                else:
                    end, _ = self.integer(what)
            if end < start:
                raise self.fail(tok, f"range {start} to {end} ends before it starts")
            if not min_number <= start <= end <= max_number:
                raise self.fail(tok, f"{start} to {end} is outside {min_number}..{max_number}")
            yield start, end
            if not self.accept(","):
                return

    def extensions(self, msg: descriptor_pb2.DescriptorProto) -> None:
        tok = self.expect("extensions")
        if self.proto3:
            raise self.fail(tok, "extension ranges are not allowed in proto3")
        added = [msg.extension_range.add(start=s, end=e + 1) for s, e in self.ranges(1, MAX_FIELD_NUMBER,
                                                                                      "an extension number")]
        if self.accept("["):
            options = descriptor_pb2.ExtensionRangeOptions()
            while True:
                self.option_body(options)
                if self.accept("]"):
                    break
                self.expect(",", "',' or ']'")
            for r in added:
                if options.ListFields():
                    r.options.CopyFrom(options)
        self.end()

    def extend(self, into: Any, scope: str) -> None:
        """``extend Foo { ... }``: its fields go to the ``extension`` list of the file or message."""
        self.expect("extend")
        extendee, tok = self.dotted("the extended message")
        start = len(into)
        numbers: dict[int, tuple[str, Token]] = {}
        holder = descriptor_pb2.DescriptorProto(name=extendee)
        for _ in self.block(f"extend {extendee}"):
            self.field(holder, scope, numbers, None, into)
        for ext in into[start:]:
            ext.extendee = extendee
            self.out.refs.append(_Ref(ext, "extendee", extendee, _join(scope, ext.name), tok))

    # -- enums and services --
    def enum(self, enum: descriptor_pb2.EnumDescriptorProto, parent: str) -> None:
        self.expect("enum")
        name_tok = self.ident("an enum name")
        enum.name = name_tok.text
        used: list[tuple[int, str, Token]] = []
        for _ in self.block(f"enum {enum.name}"):
            if self.at("option"):
                self.option(enum.options)
            elif self.at("reserved"):
                self.reserved(enum, -(2**31), 2**31 - 1, exclusive=False)
            else:
                value_tok = self.ident("an enum value name")
                value = enum.value.add(name=value_tok.text)
                self.expect("=", "'=' and the value's number")
                number, num_tok = self.integer("an enum value")
                if not -(2**31) <= number < 2**31:
                    raise self.fail(num_tok, f"enum value {number} is out of the int32 range")
                value.number = number
                if any(name == value.name for _, name, _ in used):
                    raise self.fail(value_tok, f"enum value {value.name} is declared twice in enum {enum.name}")
                used.append((value.number, value.name, num_tok))
                if self.accept("["):
                    while True:
                        self.option_body(value.options)
                        if self.accept("]"):
                            break
                        self.expect(",", "',' or ']'")
                self.end()
        if not enum.value:
            raise self.fail(name_tok, f"enum {enum.name} has no values")
        self.check_reserved(enum, used, "enum value", exclusive=False)
        if not enum.options.allow_alias:  # (the option may come after the values)
            first: dict[int, str] = {}
            for number, name, tok in used:
                if number in first:
                    raise self.fail(tok, f"{name} = {number}: {number} is already used by {first[number]} in enum "
                                         f"{enum.name} (set option allow_alias = true; to allow it)")
                first[number] = name
        if self.proto3 and enum.value[0].number != 0:
            raise self.fail(name_tok, f"the first value of enum {enum.name} must be 0 in proto3 "
                                      f"({enum.value[0].name} = {enum.value[0].number})")

    def service(self, f: descriptor_pb2.FileDescriptorProto) -> None:
        self.expect("service")
        svc = f.service.add(name=self.ident("a service name").text)
        scope = _join(f.package, svc.name)
        for _ in self.block(f"service {svc.name}"):
            if self.at("option"):
                self.option(svc.options)
                continue
            self.expect("rpc", "'rpc' or 'option'")
            m = svc.method.add(name=self.ident("an rpc name").text)
            for attr, streaming in (("input_type", "client_streaming"), ("output_type", "server_streaming")):
                if attr == "output_type":
                    self.expect("returns", "'returns'")
                self.expect("(")
                if self.at("stream") and self.peek(1).text != ")":  # not a message named stream
                    self.next()
                    setattr(m, streaming, True)
                name, name_tok = self.dotted("a message type")
                self.out.refs.append(_Ref(m, attr, name, f"{scope}.{m.name}", name_tok))
                self.expect(")")
            if self.at("{"):
                m.options.SetInParent()  # protoc keeps an empty options message for a `{}` body
                for _ in self.block(f"rpc {m.name}"):
                    self.option(m.options)
            else:
                self.end()


def parse(text: str, name: str = "input.proto", where: str | None = None) -> ParsedFile:
    """One ``.proto`` source parsed (types not yet resolved: see ``load``).

    >>> parse('syntax = "proto3"; message P { int32 x = 1; }').proto.message_type[0].field[0].json_name
    'x'
    """
    return _Parser(text, name, where or name).parse()


# --- imports and names ----------------------------------------------------------------------------


def _runtime_file(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    """A ``google/protobuf/*.proto`` file from the runtime's own pool (it ships them compiled)."""
    if not name.startswith("google/protobuf/") or not name.endswith(".proto"):
        return None
    import importlib

    from google.protobuf import descriptor_pool

    try:
        importlib.import_module(name[:-len(".proto")].replace("/", ".") + "_pb2")
        found = descriptor_pool.Default().FindFileByName(name)
    except (ImportError, KeyError):
        return None
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    return proto


class _Loader:
    """Reads a file and everything it imports, in dependency order (deps before the file)."""

    def __init__(self, include: Sequence[Path]) -> None:
        self.include = list(include)
        self.files: dict[str, ParsedFile] = {}
        self.order: list[ParsedFile] = []
        self.loading: list[str] = []

    def load(self, name: str, path: Path) -> ParsedFile:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SchemaError("", f"cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise SchemaError("", f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        parsed = parse(text, name, str(path))
        self.loading.append(name)
        for dep, tok in zip(parsed.proto.dependency, parsed.imports, strict=True):
            self.dependency(dep, tok, path.parent, parsed)
        self.loading.pop()
        self.files[name] = parsed
        self.order.append(parsed)
        return parsed

    def dependency(self, dep: str, tok: Token, here: Path, importer: ParsedFile) -> None:
        at = f"{importer.path}:{tok.line}:{tok.col}"
        if dep in self.loading:
            raise SchemaError("", f"{at}: import cycle: {' -> '.join([*self.loading, dep])}")
        if dep in self.files:
            return
        candidates = [here / dep] + [d / dep for d in self.include]
        for c in candidates:
            if c.is_file():
                self.load(dep, c)
                return
        proto = _runtime_file(dep)
        if proto is None:
            looked = ", ".join(str(c.parent) for c in candidates)
            raise SchemaError("", f"{at}: import {dep!r} not found (looked in {looked})")
        for sub in proto.dependency:
            if sub not in self.files:
                self.dependency(sub, tok, here, importer)
        parsed = ParsedFile(proto, dep)
        self.files[dep] = parsed
        self.order.append(parsed)


@dataclass
class _Symbols:
    """Every name the files declare, by full name (no leading dot): its kind and its file."""

    kinds: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add_file(self, f: ParsedFile) -> None:
        proto = f.proto
        parts = proto.package.split(".") if proto.package else []
        for i in range(1, len(parts) + 1):
            self.kinds.setdefault(".".join(parts[:i]), ("package", ""))
        prefix = proto.package + "." if proto.package else ""
        for m in proto.message_type:
            self.add_message(m, prefix, proto.name)
        for e in proto.enum_type:
            self.add_enum(e, prefix, proto.name)
        for s in proto.service:
            self.kinds[prefix + s.name] = ("service", proto.name)
            for method in s.method:
                self.kinds[f"{prefix}{s.name}.{method.name}"] = ("method", proto.name)
        for x in proto.extension:
            self.kinds.setdefault(prefix + x.name, ("field", proto.name))

    def add_message(self, m: descriptor_pb2.DescriptorProto, prefix: str, file: str) -> None:
        full = prefix + m.name
        self.kinds[full] = ("message", file)
        for f in m.field:
            self.kinds.setdefault(f"{full}.{f.name}", ("field", file))
        for o in m.oneof_decl:
            self.kinds.setdefault(f"{full}.{o.name}", ("oneof", file))
        for x in m.extension:
            self.kinds.setdefault(f"{full}.{x.name}", ("field", file))
        for n in m.nested_type:
            self.add_message(n, full + ".", file)
        for e in m.enum_type:
            self.add_enum(e, full + ".", file)

    def add_enum(self, e: descriptor_pb2.EnumDescriptorProto, prefix: str, file: str) -> None:
        self.kinds[prefix + e.name] = ("enum", file)
        for v in e.value:  # enum values live beside their enum (C++ scoping)
            self.kinds.setdefault(prefix + v.name, ("enum value", file))

    def find(self, name: str, visible: set[str]) -> tuple[str, str] | None:
        found = self.kinds.get(name)
        if found is None or (found[1] and found[1] not in visible):
            return None
        return found

    def resolve(self, name: str, scope: str, visible: set[str]) -> tuple[str, str] | None:
        """protoc's ``LookupSymbol``: ``name`` as seen from ``scope``, innermost scope first."""
        if name.startswith("."):
            full = name[1:]
            hit = self.find(full, visible)
            return (full, hit[0]) if hit else None
        first, _, rest = name.partition(".")
        scope_parts = scope.split(".") if scope else []
        while True:
            if not scope_parts:
                hit = self.find(name, visible)
                return (name, hit[0]) if hit else None
            scope_parts.pop()
            candidate = ".".join([*scope_parts, first])
            hit = self.find(candidate, visible)
            if hit is not None:
                if rest:
                    if hit[0] in ("message", "enum", "package", "service"):
                        full = f"{candidate}.{rest}"
                        found = self.find(full, visible)
                        return (full, found[0]) if found else None
                elif hit[0] in ("message", "enum"):
                    return candidate, hit[0]


def _visible(f: ParsedFile, files: dict[str, ParsedFile]) -> set[str]:
    """The files whose names ``f`` may use: itself, its imports, and what those import publicly."""
    seen = {f.proto.name}
    todo = list(f.proto.dependency)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        dep = files[name].proto
        todo += [dep.dependency[i] for i in dep.public_dependency]
    return seen


def _resolve(f: ParsedFile, symbols: _Symbols, files: dict[str, ParsedFile]) -> None:
    visible = _visible(f, files)
    for ref in f.refs:
        hit = symbols.resolve(ref.name, ref.scope, visible)
        at = f"{f.path}:{ref.token.line}:{ref.token.col}"
        if hit is None:
            anywhere = symbols.resolve(ref.name, ref.scope, set(files))
            if anywhere is not None:
                owner = symbols.kinds[anywhere[0]][1]
                raise SchemaError("", f"{at}: {ref.name!r} is declared in {owner}, which {f.proto.name} does not "
                                      f"import")
            raise SchemaError("", f"{at}: unknown type {ref.name!r} (not declared in {f.proto.name} nor in "
                                  f"what it imports)")
        full, kind = hit
        if kind not in ("message", "enum") or (ref.attr != "type_name" and kind != "message"):
            raise SchemaError("", f"{at}: {ref.name!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a "
                                  f"{'message type' if ref.attr != 'type_name' else 'type'}")
        setattr(ref.target, ref.attr, "." + full)
        if ref.attr == "type_name":
            ref.target.type = FD.TYPE_MESSAGE if kind == "message" else FD.TYPE_ENUM
            if kind == "message" and ref.target.HasField("default_value"):
                raise SchemaError("", f"{at}: field {ref.target.name} of a message type cannot have a default")


# --- the entry points -----------------------------------------------------------------------------


def load(path: str | Path, include: Iterable[str | Path] = ()) -> list[descriptor_pb2.FileDescriptorProto]:
    """The ``FileDescriptorProto`` of ``path`` and of everything it imports, dependencies first (the
    order ``protoc --include_imports --descriptor_set_out`` writes them in).

    ``path`` is named as protoc (``-I ROOT``) would name it: relative to the first ``include`` folder
    that holds it; else, when its folders spell its package (``proto/shop/v1/order.proto`` declaring
    ``package shop.v1``, the layout buf and most repositories use), relative to the folder above
    them (``shop/v1/order.proto``); else by its file name. Imports are looked up beside the importing
    file, then in the ``include`` folders, then in that root folder."""
    p = Path(path)
    folders = [Path(d) for d in include]
    name, root = p.name, p.parent
    inside = [d for d in folders if p.resolve().is_relative_to(d.resolve())]
    if inside:
        name, root = p.resolve().relative_to(inside[0].resolve()).as_posix(), inside[0]
    else:
        package = _package_of(p)
        parts = package.split(".") if package else []
        if parts and p.resolve().parent.parts[-len(parts):] == tuple(parts):
            root = p.resolve().parents[len(parts)]
            name = "/".join([*parts, p.name])
    loader = _Loader([*folders, root])
    loader.load(name, p)
    symbols = _Symbols()
    for f in loader.order:
        symbols.add_file(f)
    for f in loader.order:
        _resolve(f, symbols, loader.files)
    return [f.proto for f in loader.order]


def _package_of(path: Path) -> str:
    """The package a file declares ("" when it declares none, or cannot be read: ``load`` says why)."""
    try:
        return parse(path.read_text(encoding="utf-8"), path.name, str(path)).proto.package
    except (OSError, UnicodeDecodeError):
        return ""


def find_message(pool: Any, files: Sequence[descriptor_pb2.FileDescriptorProto], message: str | None,
                 path: str) -> Any:
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


def load_message(path: str | Path, message: str | None = None, include: Iterable[str | Path] = ()) -> Any:
    """The runtime message class for ``message`` declared in the ``.proto`` file at ``path``."""
    from google.protobuf import descriptor_pool, message_factory

    files = load(path, include)
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        try:
            pool.Add(f)
        except Exception as exc:  # the runtime's own checks (e.g. a reserved number used): name the file
            raise SchemaError("", f"{path}: the protobuf runtime refuses {f.name}: {exc}") from None
    return message_factory.GetMessageClass(find_message(pool, files[-1:], message, str(path)))
