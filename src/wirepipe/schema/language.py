"""The schema language's vocabulary: the kinds of type, the integer ranges, what is allowed, the error.

Every other module of the package builds on these; this one imports none of them.
"""

from __future__ import annotations

from enum import Enum


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


class SchemaError(ValueError):
    """A schema that cannot be read: names the field path, the bad value and what is allowed."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"schema field {path}: {message}" if path else f"schema: {message}")


def record_name(path: str) -> str:
    """The name a nested record gets from its field path (``user.home_address`` -> ``HomeAddress``), and a schema
    from its file's stem."""
    last = path.replace("[]", "").split(".")[-1] or "Record"
    return "".join(part.title() for part in last.split("_"))
