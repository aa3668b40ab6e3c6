"""Record types and functions the tests refer to by import path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Point:
    x: int
    y: int


def is_even_a(record: dict[str, Any]) -> bool:
    return record["a"] % 2 == 0


def tag_record(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "relayed": True}
