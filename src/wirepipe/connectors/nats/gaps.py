"""Counting what core NATS lost: per-publisher sequence numbers, and the gaps a consumer sees in them.

Core NATS is at-most-once: the server drops messages for a consumer that does not read
fast enough (and may close its connection), and nats-py drops what overflows a
subscription's pending limits. The client-side drops are reported by nats-py (counted
by ``NatsConnection``); the server-side ones are invisible to the consumer. So every
wirepipe publisher stamps two headers (the wire contract, README):

- ``Wirepipe-Publisher``: an id of this publishing sink for this run (random, 12 hex
  digits); a restarted publisher is a new publisher.
- ``Wirepipe-Seq``: 1, 2, 3 ... per publisher, in publish order (a record published again
  after a reconnect keeps its number).

A consumer that receives everything a publisher sends (its subscription covers the
publisher's subjects; no queue group, which shares the messages among consumers) counts,
per publisher, the numbers it never saw: ``GapCounter``. Numbers before the first one a
consumer sees were published before it listened and do not count. A number that arrives
after a later one (reordering) cancels the gap it had opened; a number seen twice is a
duplicate. Losses after the last message a consumer saw cannot show as gaps: nats-py's own
drops still count them (``unmatched_drops``).
"""

from __future__ import annotations

import bisect
import secrets
from collections.abc import Sequence
from typing import Any

from ...wire import Header

PUBLISHER = Header.PUBLISHER.value
SEQ = Header.SEQ.value
_OPEN_GAPS = 4096  # per publisher: gaps remembered to recognise a late (reordered) message


def new_publisher_id() -> str:
    return secrets.token_hex(6)


class _Publisher:
    """What one consumer knows of one publisher: the next number expected and the open gaps."""

    __slots__ = ("gaps", "missing", "next")

    def __init__(self, first: int) -> None:
        self.next = first
        self.gaps: list[tuple[int, int]] = []  # [start, end) ranges not received yet, sorted
        self.missing = 0  # this publisher's share of GapCounter.missing

    def late(self, n: int) -> bool:
        """``n`` < next: True if it fills an open gap (reordered), False if it was seen (duplicate)."""
        gaps = self.gaps
        i = bisect.bisect_right(gaps, (n, 1 << 62)) - 1
        if i < 0:
            return False
        start, end = gaps[i]
        if not start <= n < end:
            return False
        parts = [(a, b) for a, b in ((start, n), (n + 1, end)) if b > a]
        gaps[i:i + 1] = parts
        return True

    def gap(self, start: int, end: int) -> None:
        self.gaps.append((start, end))
        if len(self.gaps) > _OPEN_GAPS:
            del self.gaps[: len(self.gaps) - _OPEN_GAPS]


class GapCounter:
    """Counts missing, reordered and duplicated messages per publisher from the two stamp headers.

    ``observe(headers)`` takes a batch's header column; the common case (one publisher,
    consecutive numbers) costs two dict lookups and an ``int()`` per record.
    """

    def __init__(self) -> None:
        self.publishers: dict[str, _Publisher] = {}
        self.missing = 0  # numbers skipped, net of the late arrivals that filled them
        self.duplicates = 0
        self.reordered = 0
        self.unstamped = 0

    def missing_from(self, publisher: str) -> int:
        """Messages missing (net of late arrivals) from one publisher, by its ``Wirepipe-Publisher`` id."""
        state = self.publishers.get(publisher)
        return state.missing if state is not None else 0

    def observe(self, headers: Sequence[dict[str, str] | None] | None) -> int:
        """Account for one batch; returns how many messages it showed missing (net)."""
        if not headers:
            return 0
        fast = self._consecutive(headers)
        if fast:
            return 0
        before = self.missing
        pubs = self.publishers
        last_id: Any = None
        state: _Publisher | None = None
        unstamped = 0
        for h in headers:
            pid = h.get(PUBLISHER) if h else None
            if pid is None:
                unstamped += 1
                continue
            try:
                n = int(h[SEQ])  # type: ignore[index]
            except (KeyError, ValueError):
                unstamped += 1
                continue
            if pid != last_id:
                state = pubs.get(pid)
                if state is None:
                    state = pubs[pid] = _Publisher(n)
                last_id = pid
            assert state is not None
            expected = state.next
            if n == expected:
                state.next = n + 1
            elif n > expected:
                state.gap(expected, n)
                self.missing += n - expected
                state.missing += n - expected
                state.next = n + 1
            elif state.late(n):
                self.missing -= 1
                state.missing -= 1
                self.reordered += 1
            else:
                self.duplicates += 1
        self.unstamped += unstamped
        return self.missing - before


    def _consecutive(self, headers: Sequence[dict[str, str] | None]) -> bool:
        """The common batch, checked with C-level comprehensions: one known publisher, numbers going on
        exactly from where it was. True when accounted for; False leaves the batch to the full loop."""
        try:
            pids = {h[PUBLISHER] for h in headers}  # type: ignore[index]
            if len(pids) != 1:
                return False
            state = self.publishers.get(next(iter(pids)))
            if state is None:
                return False
            first = state.next
            if [int(h[SEQ]) for h in headers] != list(range(first, first + len(headers))):  # type: ignore[index]
                return False
        except (KeyError, TypeError, ValueError):  # unstamped or malformed records: the full loop sorts them
            return False
        state.next = first + len(headers)
        return True


class PublisherStamp:
    """The sink side: this publisher's id and the next number to stamp."""

    def __init__(self) -> None:
        self.id = new_publisher_id()
        self.next = 1

    def take(self, n: int) -> int:
        """Reserve ``n`` consecutive numbers; returns the first (a republished batch reuses it)."""
        first = self.next
        self.next += n
        return first
