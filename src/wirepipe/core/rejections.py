"""Rejected records counted by why: stage, operator and reason, with the first record as an example.

A run that rejects 3,984 records for one cause should say so once, not 3,984 times and not
nowhere: ``Rejections`` groups the ``Rejected`` records a run dead-letters by ``(stage, operator,
reason)``, where the reason is the error with what varies from record to record taken out
(``reason_of``: numbers, quoted values, list indices), so that ``user: null has no TOML form``
of every record is one group and ``ts: expected int64, got str '5'`` and ``... got str '7'`` are
one too. Each group keeps its count and the first record's own error and sequence number.

The run summary, the status snapshot (and so Prometheus and a pool's summary) and the metrics
Parquet (``reasons`` of each stage row) read the same groups.

>>> from wirepipe.core.batch import Rejected
>>> r = Rejections()
>>> r.add([Rejected("serialize", "toml", "user: null has no TOML form", {}, meta={"seq": s}) for s in (3, 9)])
>>> r.add([Rejected("serialize", "bincode", "ts: expected int64, got str '5'", {}, meta={"seq": 4})])
>>> print("\\n".join(r.lines()))
2 × serialize(toml): user: null has no TOML form (first: seq 3)
1 × serialize(bincode): ts: expected int64, got str '…' (first: seq 4: ts: expected int64, got str '5')
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .batch import Rejected

# Distinct reasons kept per run: past it, new ones count under OTHER (Prometheus labels stay bounded).
MAX_GROUPS = 100
OTHER = "(other reasons)"
_QUOTED = re.compile(r"""b?'(?:[^'\\]|\\.)*(?:'|$)|b?"(?:[^"\\]|\\.)*(?:"|$)""")
_NUMBER = re.compile(r"(?<![\w$])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w])")


def reason_of(error: str) -> str:
    """``error`` without what varies between records: quoted values as ``'…'``, numbers as ``N``.

    >>> reason_of("items[3].qty: 4294967296 is out of range for uint32 (0..4294967295)")
    'items[N].qty: N is out of range for uint32 (N..N)'
    >>> reason_of("logs.jsonl:17: not a JSON line (Expecting value: line 1 column 1 (char 0))")
    'logs.jsonl:N: not a JSON line (Expecting value: line N column N (char N))'
    """
    return _NUMBER.sub("N", _QUOTED.sub("'…'", " ".join(error.split())))


Key = tuple[str, str, str]  # stage, operator, reason


class Rejections:
    """Counts by ``(stage, operator, reason)`` with the first record's error and ``seq`` (see the module doc)."""

    def __init__(self) -> None:
        self.groups: dict[Key, list[Any]] = {}  # key -> [count, example error, example seq]
        self._distinct = 0  # groups of their own reason (not OTHER)

    def __len__(self) -> int:
        return sum(g[0] for g in self.groups.values())

    def __bool__(self) -> bool:
        return bool(self.groups)

    def add(self, rejected: Iterable[Rejected]) -> None:
        for r in rejected:
            self._count((r.stage, r.operator, reason_of(r.error)), 1, r.error, r.meta.get("seq"))

    def _count(self, key: Key, n: int, example: str, seq: Any) -> None:
        group = self.groups.get(key)
        if group is None:
            if key[2] != OTHER and self._distinct >= MAX_GROUPS:
                key = (key[0], key[1], OTHER)
                group = self.groups.get(key)
            if group is None:
                self.groups[key] = [n, example, seq]
                self._distinct += key[2] != OTHER
                return
        group[0] += n

    def rows(self) -> list[list[Any]]:
        """``[stage, operator, reason, count, example, seq]`` per group, most records first (JSON-able: a
        worker's snapshot carries them to its pool)."""
        rows = [[*key, g[0], g[1], g[2]] for key, g in self.groups.items()]
        return sorted(rows, key=lambda row: -row[3])

    @classmethod
    def from_rows(cls, rows: Iterable[Any]) -> Rejections:
        """The groups of several ``rows()`` (the workers of a pool, a worker's restarts) summed."""
        out = cls()
        for row in rows:
            stage, operator, reason, count, example, seq = row
            out._count((stage, operator, reason), int(count), example, seq)
        return out

    def lines(self, limit: int = 10) -> list[str]:
        """``3984 × serialize(toml): user: null has no TOML form (first: seq 17)``, most records first; the
        first record's own error follows its ``seq`` when it differs from the reason."""
        out = []
        rows = self.rows()
        for stage, operator, reason, count, example, seq in rows[:limit]:
            first = [f"seq {seq}"] if seq is not None else []
            if example != reason:
                first.append(example if len(example) <= 200 else example[:199] + "…")
            out.append(f"{count} × {stage}({operator}): {reason}" + (f" (first: {': '.join(first)})" if first else ""))
        rest = rows[limit:]
        if rest:
            out.append(f"{sum(r[3] for r in rest)} more in {len(rest)} other group(s) (see the dead letters)")
        return out
