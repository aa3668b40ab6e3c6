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

Two kinds of loss, shown apart (docs/concepts/loss-accounting.md): a *gap* is numbers missing
between two data messages of a publisher, seen on both sides; a *tail* is numbers a stamp
claims were published past the last data message received, with no data message past them
(yet). A stamp is one small message anyone who may publish on the stamp subject can forge, so
what it claims alone is reported as claimed, unconfirmed: it never moves the numbers the data
messages are counted against, and a data message past the claim turns what it confirms into a
gap. The numbers are parsed strictly (``parse_seq``: a positive int64 in plain decimal);
anything else is a malformed stamp, counted apart (``malformed``), never a loss figure.

Publisher ids are the publishers' word: 100,000 forged ones must not grow a consumer without limit. The table
keeps the ``max_publishers`` heard from most recently; past it the least recently heard is forgotten and counted
(``forgotten``, shown with the losses): what it loses afterwards cannot be counted (heard from again, it starts
over as a new publisher), what it had lost stays counted, and an unsure one stays unsure. One forgotten before its
final stamp (``forgotten_running``) leaves the count incomplete: the run's exit code says so (exit_codes.LossLimit),
as for an unsure one; one that had said it was done loses nothing afterwards.
"""

from __future__ import annotations

import bisect
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ...wire import Header
from .names import INT64_MAX  # the largest number a stamp may carry: what Parquet, Prometheus and peers hold

_OPEN_GAPS = 4096  # per publisher: gaps remembered to recognise a late (reordered) message
MAX_PUBLISHERS = 10_000  # publishers a consumer keeps count of (the least recently heard is forgotten past it)


def parse_seq(text: object) -> int | None:
    """A ``Wirepipe-Seq`` or ``Wirepipe-Last-Seq`` value: a positive int64 written in plain decimal (no sign,
    space, leading zero or other digits than 0-9); None for anything else.

    >>> [parse_seq(v) for v in ("1", "9223372036854775807", "9223372036854775808", "0", "-1", "+1", " 1", "01",
    ...                         "1e9", "\u0661", None)]
    [1, 9223372036854775807, None, None, None, None, None, None, None, None, None]
    """
    if type(text) is not str or not 0 < len(text) <= 19 or not (text.isascii() and text.isdigit()) or text[0] == "0":
        return None
    n = int(text)
    return n if n <= INT64_MAX else None


def new_publisher_id() -> str:
    return secrets.token_hex(6)


class _Publisher:
    """What one consumer knows of one publisher: the next number expected, the open gaps, the last number its
    stamps claim, whether it said it was done (its final stamp) and whether a disconnect since it was last
    heard from hides a loss."""

    __slots__ = ("claimed", "done", "gap", "gaps", "next", "unsure")

    def __init__(self, first: int) -> None:
        self.next = first
        self.gaps: list[tuple[int, int]] = []  # [start, end) ranges not received yet, sorted
        self.gap = 0  # numbers missing between data messages (net of late arrivals): this publisher's share
        self.claimed = 0  # the highest Wirepipe-Last-Seq its stamps announced
        self.done = False
        self.unsure = False

    @property
    def tail(self) -> int:
        """Numbers its stamps claim were published past the last data message received from it."""
        return max(0, self.claimed + 1 - self.next)

    def late(self, n: int) -> bool:
        """``n`` < next: True if it fills an open gap (reordered), False if it was seen (duplicate)."""
        gaps = self.gaps
        i = bisect.bisect_right(gaps, (n, 1 << 64)) - 1
        if i < 0:
            return False
        start, end = gaps[i]
        if not start <= n < end:
            return False
        parts = [(a, b) for a, b in ((start, n), (n + 1, end)) if b > a]
        gaps[i:i + 1] = parts
        return True

    def open_gap(self, start: int, end: int) -> None:
        self.gaps.append((start, end))
        if len(self.gaps) > _OPEN_GAPS:
            del self.gaps[: len(self.gaps) - _OPEN_GAPS]


class GapCounter:
    """Counts missing, reordered and duplicated messages per publisher from the two stamp headers.

    ``observe(headers)`` takes a batch's header column; the common case (one publisher,
    consecutive numbers) costs a dict lookup and a string comparison per record. ``gap`` and
    ``tail`` are the two kinds of loss (the module doc), ``missing`` their sum. At most ``max_publishers`` are
    kept, the least recently heard first forgotten (``forgotten``).
    """

    def __init__(self, max_publishers: int = MAX_PUBLISHERS) -> None:
        self.max_publishers = max(1, max_publishers)
        self.publishers: OrderedDict[str, _Publisher] = OrderedDict()  # the least recently heard first
        self.forgotten = 0  # publishers evicted past max_publishers: their later losses cannot be counted
        self.forgotten_running = 0  # of them, forgotten before their final stamp: the loss count is incomplete
        self._forgotten_unsure = 0  # of them, unsure when forgotten: they stay so
        self.gap = 0  # numbers skipped between data messages, net of the late arrivals that filled them
        self.tail = 0  # numbers stamps claim past the last data message of their publisher: unconfirmed
        self.duplicates = 0
        self.reordered = 0
        self.unstamped = 0
        self.malformed = 0  # stamps (on a message or on its own) whose numbers or publisher cannot be read
        self.disconnects = 0

    @property
    def missing(self) -> int:
        return self.gap + self.tail

    @property
    def unsure(self) -> int:
        """Publishers not heard from since a disconnect: what they sent meanwhile is not counted yet."""
        return sum(1 for p in self.publishers.values() if p.unsure) + self._forgotten_unsure

    def _heard(self, publisher: str, first: int) -> _Publisher:
        """The state of ``publisher`` (new from ``first``: its first number seen), now the most recently heard; past
        ``max_publishers`` the least recently heard is forgotten."""
        pubs = self.publishers
        state = pubs.get(publisher)
        if state is not None:
            pubs.move_to_end(publisher)
            return state
        state = pubs[publisher] = _Publisher(first)
        while len(pubs) > self.max_publishers:
            _, old = pubs.popitem(last=False)
            self.forgotten += 1
            self.forgotten_running += not old.done
            self._forgotten_unsure += old.unsure
        return state

    def stamp(self, publisher: str, last: int, final: bool = False) -> int:
        """A publisher's stamp: it published every number up to ``last`` (``final``: and no more). The ones past
        the last data message received are its tail, claimed, not confirmed (a later data message past them
        confirms the ones it did not see as a gap; one that arrives fills its place). Returns how many more it
        showed missing. A publisher this consumer never heard from is not counted: it may have published before
        the consumer listened."""
        state = self.publishers.get(publisher)
        if state is None:
            return 0
        self.publishers.move_to_end(publisher)
        state.unsure = False
        state.done = state.done or final
        if last <= state.claimed:
            return 0
        before = state.tail
        state.claimed = last
        added = state.tail - before
        self.tail += added
        return added

    def disconnected(self) -> None:
        """The consumer lost its connection: what the server held for it and what was published until it
        reconnects is lost; every publisher still running is unsure until it is heard from again."""
        self.disconnects += 1
        for state in self.publishers.values():
            if not state.done:
                state.unsure = True

    def missing_from(self, publisher: str) -> int:
        """Messages missing (net of late arrivals, gaps and tail) from one publisher, by its ``Wirepipe-Publisher``
        id."""
        state = self.publishers.get(publisher)
        return state.gap + state.tail if state is not None else 0

    def observe(self, headers: Sequence[dict[str, str] | None] | None) -> int:
        """Account for one batch; returns how many messages it showed missing (net)."""
        if not headers:
            return 0
        fast = self._consecutive(headers)
        if fast is not None:
            return fast
        before = self.missing
        last_id: Any = None
        state: _Publisher | None = None
        unstamped = malformed = 0
        publisher, seq = Header.PUBLISHER, Header.SEQ  # locals: the loop reads them per record
        for h in headers:
            pid = h.get(publisher) if h else None
            if pid is None:
                if h and seq in h:
                    malformed += 1  # a number without its publisher
                else:
                    unstamped += 1
                continue
            n = parse_seq(h.get(seq))  # type: ignore[union-attr]
            if n is None:
                malformed += 1
                continue
            if pid != last_id:
                state = self._heard(pid, n)
                last_id = pid
            assert state is not None
            state.unsure = False
            expected = state.next
            if n >= expected:
                if n > expected:
                    state.open_gap(expected, n)
                    self.gap += n - expected
                    state.gap += n - expected
                if state.claimed >= expected:  # a claimed tail: what this message reaches is no longer past the last
                    self.tail -= min(n, state.claimed) + 1 - expected
                state.next = n + 1
            elif state.late(n):
                self.gap -= 1
                state.gap -= 1
                self.reordered += 1
            else:
                self.duplicates += 1
        self.unstamped += unstamped
        self.malformed += malformed
        return self.missing - before

    def _consecutive(self, headers: Sequence[dict[str, str] | None]) -> int | None:
        """The common batch, checked with C-level comprehensions: one known publisher, numbers going on
        exactly from where it was, written as ``parse_seq`` reads them (the strings compared with the
        expected numbers' own). When accounted for, how many it showed missing (0, or less when it reaches
        a claimed tail); None leaves the batch to the full loop."""
        publisher, seq = Header.PUBLISHER, Header.SEQ
        try:
            pids = {h[publisher] for h in headers}  # type: ignore[index]
            if len(pids) != 1:
                return None
            pid = next(iter(pids))
            state = self.publishers.get(pid)
            if state is None:
                return None
            first, end = state.next, state.next + len(headers)
            if end - 1 > INT64_MAX or [h[seq] for h in headers] != list(map(str, range(first, end))):  # type: ignore[index]
                return None
        except (KeyError, TypeError):  # unstamped records: the full loop sorts them
            return None
        self.publishers.move_to_end(pid)
        reached = min(end, state.claimed + 1) - first if state.claimed >= first else 0
        self.tail -= reached
        state.next = end
        state.unsure = False
        return -reached
class PublisherStamp:
    """The sink side: this publisher's id and the next number to stamp (it moves on only when nats-py took
    the record, so a record refused or not yet published never leaves a number unused)."""

    def __init__(self) -> None:
        self.id = new_publisher_id()
        self.next = 1
