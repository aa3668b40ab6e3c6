"""Looking into records by field path: one field's value, a condition on it, the first difference.

A path is the one ``--set`` takes (``user.id``, ``items[0].price``; ``models.parse_field_path``).
A ``Condition`` is one test on the value at a path; ``wirepipe tap --filter`` writes it as a
small expression, ``wirepipe test`` as YAML fields, and both evaluate the same objects. The
expression language has no ``eval``: a path, an operator, a literal.

>>> c = parse_condition("user.age >= 18")
>>> c({"user": {"age": 30}}), c({"user": {"age": 3}}), c({"user": {}})
(True, False, False)
>>> parse_condition("level in [warn, error]")({"level": "error"})
True
>>> first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]})
(['a', 1, 'b'], 2, 3)

``matches`` runs on records a publisher chose, so its engine is RE2 (``compile_pattern``): linear in the
text whatever the pattern (Python's ``re`` backtracks: ``(a+)+$`` on a hostile record runs for ever). A
pattern RE2 cannot take (a backreference, a lookaround) is refused where it is given, with the reason.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .models import field_path, parse_field_path
from .records import as_dict, is_typed_record


class _Missing:
    """The value at a path a record does not have (``None`` is a value: JSON's null)."""

    def __repr__(self) -> str:
        return "missing"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


def value_at(record: Any, path: Sequence[str | int]) -> Any:
    """The value at ``path`` in ``record`` (mappings by key, lists by index, objects by attribute), or ``MISSING``."""
    value = record
    for part in path:
        if isinstance(value, Mapping):
            if part in value:
                value = value[part]
            elif isinstance(part, int) and str(part) in value:
                value = value[str(part)]
            else:
                return MISSING
        elif isinstance(value, (list, tuple)) and isinstance(part, int):
            if not -len(value) <= part < len(value):
                return MISSING
            value = value[part]
        elif isinstance(part, str) and not part.startswith("_") and hasattr(value, part):
            value = getattr(value, part)  # a typed record: a dataclass, a msgspec Struct, a faust Record
        else:
            return MISSING
    return value


def same(a: Any, b: Any) -> bool:
    """Equal as records are: ``1 == 1.0``, but ``True`` is not ``1`` (JSON tells them apart)."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    try:
        return bool(a == b)
    except Exception:  # an object whose == raises (a numpy array compared elementwise)
        return False


def size_of(value: Any) -> int | None:
    """Bytes of a payload, characters of a string, items of a list or mapping; None for anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return memoryview(value).nbytes
    if isinstance(value, (str, list, tuple, dict)):
        return len(value)
    return None


# --- conditions ---------------------------------------------------------------------------------------

_ORDER = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in", "matches", "exists", "not exists")


@dataclass(frozen=True)
class Condition:
    """``path op operand``: true or false for one record. A record without the field meets only
    ``not exists`` (and ``!=``: a missing value differs from every literal). ``size`` compares the
    value's size (``size_of``) instead of the value: payload bounds."""

    path: tuple[str | int, ...]
    op: str
    operand: Any = None
    size: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPERATORS:
            raise ValueError(f"unknown operator {self.op!r}: allowed {', '.join(OPERATORS)}")
        if self.op == "matches":
            compile_pattern(self.operand)  # a bad pattern fails here, not at the first record

    def value(self, record: Any) -> Any:
        """What the condition looks at in ``record`` (``MISSING`` when it has no such field)."""
        value = value_at(record, self.path)
        if self.size and value is not MISSING:
            n = size_of(value)
            return MISSING if n is None else n
        return value

    def __call__(self, record: Any) -> bool:
        value = self.value(record)
        op = self.op
        if op == "exists":
            return value is not MISSING
        if op == "not exists":
            return value is MISSING
        if value is MISSING:
            return op == "!="
        if op == "==":
            return same(value, self.operand)
        if op == "!=":
            return not same(value, self.operand)
        if op in ("in", "not in"):
            found = any(same(value, x) for x in self.operand)
            return found if op == "in" else not found
        if op == "matches":
            return isinstance(value, str) and _search(self.operand, value)
        if isinstance(value, bool) or isinstance(self.operand, bool):
            return False
        try:
            return bool(_ORDER[op](value, self.operand))
        except TypeError:  # a string against a number: not ordered, not true
            return False

    def __str__(self) -> str:
        target = field_path(self.path) or "the record"
        if self.size:
            target = f"size of {target}"
        if self.op in ("exists", "not exists"):
            return f"{target} {self.op}"
        return f"{target} {self.op} {_literal(self.operand)}"


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear time: see the module doc); ``ValueError`` saying why RE2 refuses it.

    >>> compile_pattern(r"^(\\w+)@example\\.com$").search("ops@example.com") is not None
    True
    >>> compile_pattern(r"(a)\\1")
    Traceback (most recent call last):
    ...
    ValueError: not a pattern the linear-time engine (RE2) takes: invalid escape sequence: \\1 (no backreferences or lookarounds)
    """
    import re2

    options = re2.Options()
    options.log_errors = False  # the reason is in the error: nothing on stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        hint = " (no backreferences or lookarounds)" if reason.startswith(("invalid escape", "invalid perl")) else ""
        raise ValueError(f"not a pattern the linear-time engine (RE2) takes: {reason}{hint}") from None


def _search(pattern: str, text: str) -> bool:
    try:
        return compile_pattern(pattern).search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for RE2 to read, nothing matches
        return False


def _literal(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


_EXPRESSION = re.compile(
    r"\s*(?P<path>[^\s=!<>\[\]]+(?:\[\d+\][^\s=!<>\[\]]*)*)\s*"
    r"(?P<op>==|!=|<=|>=|<|>|not\s+in\b|in\b|not\s+exists\b|exists\b|matches\b)\s*(?P<rest>.*?)\s*$", re.S)
_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<punct>[\[\],])|(?P<word>[^\s\[\],'"]+))""")


def parse_condition(text: str) -> Condition:
    """``field op literal`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in [a, b]``, ``not in [...]``,
    ``matches 'regex'``) or ``field exists`` / ``field not exists``. Literals: numbers, ``'quoted'`` or
    ``"quoted"`` strings, ``true``/``false``/``null``, and bare words as strings. ``ValueError`` says what
    is wrong."""
    m = _EXPRESSION.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r}: expected `field OP value` with OP one of ==, !=, <, <=, >, >=, in, not in, "
                         "matches, or `field exists` / `field not exists` (e.g. level == error)")
    path = tuple(parse_field_path(m.group("path")))
    op = " ".join(m.group("op").split())
    rest = m.group("rest")
    if op in ("exists", "not exists"):
        if rest:
            raise ValueError(f"{text!r}: nothing may follow `{op}` (got {rest!r})")
        return Condition(path, op)
    if not rest:
        raise ValueError(f"{text!r}: a value must follow `{op}`")
    operand = _parse_literal(rest, text)
    if op in ("in", "not in") and not isinstance(operand, list):
        raise ValueError(f"{text!r}: `{op}` takes a list, e.g. [a, b]")
    if op not in ("in", "not in") and isinstance(operand, list):
        raise ValueError(f"{text!r}: `{op}` takes one value, not a list")
    if op == "matches":
        if not isinstance(operand, str):
            raise ValueError(f"{text!r}: `matches` takes a regular expression (a string)")
        try:
            compile_pattern(operand)
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None
    return Condition(path, op, operand)


def _parse_literal(rest: str, text: str) -> Any:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(rest):
        m = _TOKEN.match(rest, pos)
        if m is None or m.end() == pos:
            if rest[pos:].strip():
                raise ValueError(f"{text!r}: cannot read the value at {rest[pos:]!r} (an unclosed quote?)")
            break
        kind = m.lastgroup
        assert kind is not None
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    if not tokens:
        raise ValueError(f"{text!r}: a value is missing")
    if tokens[0] == ("punct", "["):
        if tokens[-1] != ("punct", "]"):
            raise ValueError(f"{text!r}: a list ends with ]")
        items = tokens[1:-1]
        values = [_scalar(k, v) for k, v in items[0::2]]
        if any(t != ("punct", ",") for t in items[1::2]) or any(k == "punct" for k, _ in items[0::2]):
            raise ValueError(f"{text!r}: a list is [value, value, ...]")
        return values
    if len(tokens) != 1 or tokens[0][0] == "punct":
        raise ValueError(f"{text!r}: one value expected after the operator, got {rest!r} (quote a value with spaces)")
    return _scalar(*tokens[0])


def _scalar(kind: str, text: str) -> Any:
    if kind == "str":
        body = text[1:-1]
        return re.sub(r"\\(.)", r"\1", body)
    words = {"true": True, "false": False, "null": None}
    if text in words:
        return words[text]
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    return text


# --- differences ---------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A record as JSON or YAML holds it, to compare and to show: bytes as ``{"$base64": ...}`` (the JSON
    format's convention), times as ISO 8601 text, tuples as lists, typed records (dataclasses, msgspec
    Structs, faust Records, pydantic models) as the dict ``core.records.as_dict`` makes of them, as the formats
    write them; anything else as its ``repr``."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): plain(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return {"$base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    import datetime as dt

    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return plain(value.tolist())
    if is_typed_record(value):
        return plain(as_dict(value))
    return repr(value)



def first_difference(expected: Any, actual: Any, path: tuple[str | int, ...] = (), *, absent_is_null: bool = False
                     ) -> tuple[list[str | int], Any, Any] | None:
    """The first place two values differ: (path, expected there, actual there), ``MISSING`` on the side that lacks
    the field or item; None when they are equal (``same``: ``1 == 1.0``, ``True`` is not ``1``). Mappings are
    walked in the expected value's key order, then the keys only ``actual`` has; lists and tuples item by item.
    With ``absent_is_null`` a field one side lacks and the other holds as None is no difference (the study's
    round trip: a typed schema has one value for both).

    The one walker of two values: ``wirepipe test``'s expectations, the study's round-trip check and a reload's
    changed field all find their difference here.

    >>> first_difference({"a": 1, "b": None}, {"a": 1}, absent_is_null=True) is None
    True
    """
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        for key in [*expected, *(k for k in actual if k not in expected)]:
            e, a = expected.get(key, MISSING), actual.get(key, MISSING)
            if e is MISSING or a is MISSING:
                if not (absent_is_null and (e is None or a is None)):
                    return [*path, key], e, a
                continue
            found = first_difference(e, a, (*path, key), absent_is_null=absent_is_null)
            if found is not None:
                return found
        return None
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(e, a, (*path, i), absent_is_null=absent_is_null)
            if found is not None:
                return found
        if len(expected) != len(actual):
            i = min(len(expected), len(actual))
            return ([*path, i], expected[i] if i < len(expected) else MISSING,
                    actual[i] if i < len(actual) else MISSING)
        return None
    return None if same(expected, actual) else ([*path], expected, actual)
