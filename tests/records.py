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


def fail_odd_x(record: dict[str, Any]) -> dict[str, Any]:
    """Rejects (raises for) every record whose ``x`` is odd: a run with some rejections."""
    if record["x"] % 2:
        raise ValueError(f"odd x: {record['x']}")
    return record


def first_then_crawl(record: dict[str, Any]) -> dict[str, Any]:
    """A ``map`` for interruption tests: the first record creates the file ``$WIREPIPE_TEST_STARTED`` (the test
    waits for it before it signals), and every record takes 20 ms, so the run is still going when the signal
    comes."""
    import os
    import time
    from pathlib import Path

    marker = os.environ.get("WIREPIPE_TEST_STARTED")
    if marker:
        Path(marker).touch()
    time.sleep(0.02)
    return record
