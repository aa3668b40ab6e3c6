"""Counting what core NATS lost: per-publisher sequence numbers, and the gaps a consumer sees in them.

Core NATS is at-most-once: the server drops messages for a consumer that does not read
fast enough (and may close its connection), and nats-py drops what overflows a
subscription's pending limits. The client-side drops are reported by nats-py (counted
by ``NatsConnection``); the server-side ones are invisible to the consumer. So every
wirepipe publisher stamps two headers (the wire contract, docs/concepts/wire-contract.md):

- ``Wirepipe-Publisher``: an id of this publishing sink for this run (random, 12 hex
  digits); a restarted publisher is a new publisher.
- ``Wirepipe-Seq``: 1, 2, 3 ... per publisher, in publish order, without holes (a record the
  sink refuses takes no number; a batch an outage cut goes on with the next one).

A consumer that receives everything a publisher sends (its subscription covers the
publisher's subjects; no queue group, which shares the messages among consumers) counts,
per publisher, the numbers it never saw: ``GapCounter``. Numbers before the first one a
consumer sees were published before it listened and do not count. A number that arrives
after a later one (reordering) cancels the gap it had opened; a number seen twice is a
duplicate.

Losses after the last message a consumer saw (the tail of a run) cannot show as gaps, so a
publisher also *stamps*: every second or so, and when it closes, it announces the last
number it published on ``_WIREPIPE.last.<subject>`` (``Wirepipe-Last-Seq``; the final stamp
also carries ``Wirepipe-Final``). A consumer subscribed to the same subjects counts the
numbers up to that one it never received (``GapCounter.stamp``). A disconnect (the server
closes a consumer that does not read fast enough, and drops what it held for it) makes every
publisher still running *unsure* until the consumer hears from it again: its next message
or stamp counts what the disconnect lost; a publisher never heard from again (it ended while
the consumer was away) leaves its tail unknown, and the consumer says so (``unsure``) rather
than report nothing lost.
"""

from __future__ import annotations

import bisect
import secrets
from collections.abc import Sequence
from typing import Any

from ...wire import Header

_OPEN_GAPS = 4096  # per publisher: gaps remembered to recognise a late (reordered) message


def new_publisher_id() -> str:
    return secrets.token_hex(6)


class _Publisher:
    """What one consumer knows of one publisher: the next number expected, the open gaps, whether it said
    it was done (its final stamp) and whether a disconnect since it was last heard from hides a loss."""

    __slots__ = ("done", "gaps", "missing", "next", "unsure")

    def __init__(self, first: int) -> None:
        self.next = first
        self.gaps: list[tuple[int, int]] = []  # [start, end) ranges not received yet, sorted
        self.missing = 0  # this publisher's share of GapCounter.missing
        self.done = False
        self.unsure = False

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
        self.disconnects = 0

    @property
    def unsure(self) -> int:
        """Publishers not heard from since a disconnect: what they sent meanwhile is not counted yet."""
        return sum(1 for p in self.publishers.values() if p.unsure)

    def stamp(self, publisher: str, last: int, final: bool = False) -> int:
        """A publisher's stamp: it published every number up to ``last`` (``final``: and no more). The ones
        not received are missing (one that arrives later still cancels its gap). Returns how many it showed
        missing. A publisher this consumer never heard from is not counted: it may have published before
        the consumer listened."""
        state = self.publishers.get(publisher)
        if state is None:
            return 0
        state.unsure = False
        state.done = state.done or final
        if last < state.next:
            return 0
        missing = last + 1 - state.next
        state.gap(state.next, last + 1)
        self.missing += missing
        state.missing += missing
        state.next = last + 1
        return missing

    def disconnected(self) -> None:
        """The consumer lost its connection: what the server held for it and what was published until it
        reconnects is lost; every publisher still running is unsure until it is heard from again."""
        self.disconnects += 1
        for state in self.publishers.values():
            if not state.done:
                state.unsure = True

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
        publisher, seq = Header.PUBLISHER, Header.SEQ  # locals: the loop reads them per record
        for h in headers:
            pid = h.get(publisher) if h else None
            if pid is None:
                unstamped += 1
                continue
            try:
                n = int(h[seq])  # type: ignore[index]
            except (KeyError, ValueError):
                unstamped += 1
                continue
            if pid != last_id:
                state = pubs.get(pid)
                if state is None:
                    state = pubs[pid] = _Publisher(n)
                last_id = pid
            assert state is not None
            state.unsure = False
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
        publisher, seq = Header.PUBLISHER, Header.SEQ
        try:
            pids = {h[publisher] for h in headers}  # type: ignore[index]
            if len(pids) != 1:
                return False
            state = self.publishers.get(next(iter(pids)))
            if state is None:
                return False
            first = state.next
            if [int(h[seq]) for h in headers] != list(range(first, first + len(headers))):  # type: ignore[index]
                return False
        except (KeyError, TypeError, ValueError):  # unstamped or malformed records: the full loop sorts them
            return False
        state.next = first + len(headers)
        state.unsure = False
        return True


class PublisherStamp:
    """The sink side: this publisher's id and the next number to stamp (it moves on only when nats-py took
    the record, so a record refused or not yet published never leaves a number unused)."""

    def __init__(self) -> None:
        self.id = new_publisher_id()
        self.next = 1
