"""``wirepipe.core.fields``: field paths into records, the condition language of ``tap --filter`` and test files,
and the first difference between two records."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from wirepipe.core.fields import MISSING, Condition, first_difference, parse_condition, plain, value_at

RECORD = {"user": {"id": 7, "name": "ada", "tags": ["a", "b"]}, "level": "warn", "ok": True, "n": None,
          "Content-Type": "application/json"}


@pytest.mark.parametrize(("text", "result"), [
    ("user.id == 7", True), ("user.id == 7.0", True), ("user.id != 7", False), ("user.id < 8", True),
    ("user.id <= 7", True), ("user.id > 7", False), ("user.id >= 8", False),
    ("level == warn", True), ("level == 'warn'", True), ('level == "warn"', True), ("level in [info, warn]", True),
    ("level not in [info, warn]", False), ("user.name matches '^a.a$'", True), ("user.tags[1] == b", True),
    ("user.tags.0 == a", True), ("user.tags[5] exists", False), ("user.email not exists", True),
    ("ok == true", True), ("ok == 1", False),  # JSON tells true from 1
    ("n == null", True), ("n exists", True),  # null is a value
    ("user.email == x", False), ("user.email != x", True),  # a missing field differs from every value
    ("level > 3", False),  # a string against a number: not ordered, not true
    ("Content-Type == application/json", True), ("user.id matches '7'", False),  # matches reads text only
    ("level != 'it\\'s'", True),  # a backslash escapes a quote
])
def test_conditions(text: str, result: bool) -> None:
    assert parse_condition(text)(RECORD) is result


@pytest.mark.parametrize(("text", "message"), [
    ("level", "expected `field OP value`"),
    ("level ~= x", "expected `field OP value`"),
    ("level ==", "a value must follow `==`"),
    ("level == a b", "one value expected after the operator"),
    ("level in a", "`in` takes a list"),
    ("level == [a]", "`==` takes one value, not a list"),
    ("level in [a b]", "a list is [value, value, ...]"),
    ("level in [a, b", "a list ends with ]"),
    ("level matches '('", "not a pattern the linear-time engine .RE2. takes: missing .: ."),
    (r"level matches '(a)\\1'", "takes: invalid escape sequence: .1 .no backreferences or lookarounds.$"),
    ("level matches '(?=a)b'", "takes: invalid perl operator: ..= .no backreferences or lookarounds.$"),
    ("level exists x", "nothing may follow `exists`"),
    ("level == 'open", "cannot read the value"),
])
def test_a_bad_expression_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_condition(text)


def test_matches_is_linear_in_the_record_whatever_the_pattern() -> None:
    """``(a+)+$`` backtracks exponentially in Python's ``re`` on a record of a's and one b; RE2 answers at once
    (the test would not end otherwise: no clock is read)."""
    hostile = {"name": "a" * 100_000 + "b"}
    assert parse_condition("name matches '(a+)+$'")(hostile) is False
    assert parse_condition("name matches '^a+b$'")(hostile) is True
    assert parse_condition("name matches 'café'")({"name": "un café"}) is True
    assert parse_condition("name matches 'x'")({"name": "\ud800x"}) is False  # no UTF-8 for it: no match


def test_conditions_read_as_written_and_bound_sizes() -> None:
    assert str(parse_condition("level in [info, 'a b', 3, true, null]")) == "level in ['info', 'a b', 3, true, null]"
    assert str(parse_condition("user.tags[0] not exists")) == "user.tags[0] not exists"
    small = Condition((), "<=", 4, size=True)
    assert small(b"abcd") and not small(b"abcde") and str(small) == "size of the record <= 4"
    assert not small(12)  # no size: not within bounds


def test_value_at_reads_mappings_lists_and_typed_records() -> None:
    @dataclasses.dataclass
    class Point:
        x: int
        _hidden: int = 0

    assert value_at({"p": Point(3)}, ["p", "x"]) == 3
    assert value_at({"p": Point(3)}, ["p", "_hidden"]) is MISSING
    assert value_at({"a": [1, 2]}, ["a", -1]) == 2 and value_at({"a": [1]}, ["a", 3]) is MISSING
    assert value_at({"0": "text key"}, [0]) == "text key"


def test_first_difference_walks_to_the_field() -> None:
    assert first_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}) is None
    assert first_difference({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2, 3]}) == (["b", 2], MISSING, 3)
    assert first_difference({"a": 1, "b": 2}, {"a": 1}) == (["b"], 2, MISSING)
    assert first_difference({"a": 1}, {"a": 1, "z": 0}) == (["z"], MISSING, 0)
    assert first_difference({"a": True}, {"a": 1}) == (["a"], True, 1)
    assert first_difference([{"x": 1.0}], [{"x": 1}]) is None
    assert first_difference({"a": {"b": 1}}, {"a": [1]}) == (["a"], {"b": 1}, [1])


def test_plain_is_what_json_and_yaml_hold() -> None:
    @dataclasses.dataclass
    class Row:
        at: dt.datetime
        raw: bytes

    value = {"row": Row(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), b"\x00\xff"), "t": (1, 2)}
    assert plain(value) == {"row": {"at": "2026-01-02T03:04:05+00:00", "raw": {"$base64": "AP8="}}, "t": [1, 2]}
