"""The study's round-trip check: do the decoded records equal the input? One check, in-process and over NATS.

Decoded records equal the input, in order, value for value, with one rule: **a field that is absent and a
field that is null are the same**, in every format and on every transport, at any depth. A typed schema
has one value for both (a ``?`` field is "absent or null"), so the positional and typed formats
(msgpack-array, avro, protobuf, bincode, ...) decode an absent optional field as null, and an Arrow
message of several records gives each the union of their fields, null where one was absent; JSON and
msgpack keep whichever they were given. Anything else is a difference: a value under another name, a
missing value, a value of another type (``1`` and ``1.0`` are equal, as Python compares them; ``True`` is not
``1``: JSON tells them apart).
"""

from __future__ import annotations

from typing import Any

from ...core.fields import MISSING, first_difference
from ...core.models import field_path


def round_trip_error(decoded: list[Any], values: list[Any]) -> str | None:
    """Why ``decoded`` differs from the input ``values`` (the first differing record and field, both values),
    or None when it equals it under this module's rule.

    >>> round_trip_error([{"a": 1, "b": None}], [{"a": 1}]) is None
    True
    >>> round_trip_error([{"a": 1, "b": 2}], [{"a": 1}])
    'record 0, field b: (absent) in the input, 2 decoded'
    """
    if decoded == values:  # the common case, at C speed
        return None
    return record_difference(decoded, values)


def record_difference(got: list[Any], wanted: list[Any]) -> str | None:
    """The first place two lists of records differ, as a reader finds it (``core.fields.first_difference``, absent
    and null as one value): the record's index, the field's path and both values, with their types when those
    differ.

    >>> record_difference([{"a": 1, "b": [1, 2]}], [{"a": 1, "b": [1, 3]}])
    'record 0, field b[1]: 3 in the input, 2 decoded'
    >>> record_difference([{"a": "1"}], [{"a": 1, "b": None}])
    "record 0, field a: 1 (int) in the input, '1' (str) decoded"
    """
    if len(got) != len(wanted):
        return f"{len(got)} records decoded from {len(wanted)}"
    found = first_difference(wanted, got, absent_is_null=True)
    if found is None:
        return None
    (i, *path), wv, gv = found
    field = f", field {field_path(path)}" if path else ""
    typed = type(gv) is not type(wv) and gv is not MISSING and wv is not MISSING
    return f"record {i}{field}: {_shown(wv, typed)} in the input, {_shown(gv, typed)} decoded"


def _shown(value: Any, typed: bool, limit: int = 60) -> str:
    text = "(absent)" if value is MISSING else repr(value) if isinstance(value, (str, bytes)) else str(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{text} ({type(value).__name__})" if typed else text
