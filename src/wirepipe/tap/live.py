"""What ``wirepipe tap --table`` shows: per publisher, the rate, the bytes per record on the wire and
before compression, the end-to-end latency and the messages missing from its sequence numbers.

A publisher is what ``Wirepipe-Publisher`` names (a core ``nats`` sink, one id per run); messages
without the stamp (a JetStream publisher, another client) share the row ``-``, whose losses cannot be
counted from the messages (the table's footnote says so: a stream's own sequence tells them). Losses are
counted by ``connectors.gaps.GapCounter`` as any core NATS consumer counts them.

What it tracks is bounded, whatever the publishers claim: at most ``MAX_PUBLISHERS`` rows (messages
from further ids are counted together in one row, ``OTHERS``, their losses not counted), and the table
shows the ``SHOWN`` busiest of them, with a line for the rest. The table is wirepipe's one table model
(``core/table.py``), drawn as text; on a terminal rich's ``Live`` redraws that text in place, as ``wirepipe top``
does.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..connectors.nats.gaps import GapCounter
from ..wire import Header

if TYPE_CHECKING:
    from ..core.table import Table

UNSTAMPED = "-"
OTHERS = "(others)"  # the row of the publishers past MAX_PUBLISHERS
MAX_PUBLISHERS = 1000  # rows tracked: ids are the publishers' word, 100,000 forged ones must not cost more
SHOWN = 25  # rows drawn, the busiest first: a live table redraws them every second
_LATENCIES = 4096  # per publisher: the latest latencies the percentiles are taken over
_SUBJECTS = 1000  # per publisher: distinct subjects counted (a subject per record would grow without end)


@dataclass
class PublisherRow:
    messages: int = 0
    wire_bytes: int = 0
    decoded: int = 0
    serialized_bytes: int = 0
    undecoded: int = 0
    first: float = 0.0
    last: float = 0.0
    subjects: set[str] = field(default_factory=set)
    encoding: str = ""
    content_type: str = ""
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCIES))

    def percentile(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class TapStats:
    """Counts per publisher, fed one batch of received messages at a time."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.rows: dict[str, PublisherRow] = {}
        self.gaps = GapCounter()
        self.clock = clock

    def observe(self, payloads: Sequence[bytes], subjects: Sequence[str | None], headers: Sequence[dict[str, str] | None],
                sent_ns: Sequence[int | None], received_ns: Sequence[int | None],
                serialized: dict[int, int], undecoded: set[int]) -> None:
        """One batch: ``serialized`` is each decoded message's size before compression (by index),
        ``undecoded`` the indices of messages that did not decode."""
        now = self.clock()
        publisher = Header.PUBLISHER
        rows = self.rows
        counted: list[dict[str, str] | None] = []  # the headers whose losses are counted: tracked publishers'
        for i, payload in enumerate(payloads):
            h = headers[i] or {}
            pid = h.get(publisher, UNSTAMPED)
            row = rows.get(pid)
            if row is None:
                if len(rows) >= MAX_PUBLISHERS:
                    pid = OTHERS
                    row = rows.get(pid)
                if row is None:
                    row = rows[pid] = PublisherRow(first=now)
            counted.append(headers[i] if pid != OTHERS else None)
            row.messages += 1
            row.last = now
            row.wire_bytes += len(payload)
            if i in serialized:
                row.decoded += 1
                row.serialized_bytes += serialized[i]
            if i in undecoded:
                row.undecoded += 1
            subject = subjects[i]
            if subject is not None and len(row.subjects) < _SUBJECTS:
                row.subjects.add(subject)
            row.encoding = h.get(Header.CONTENT_ENCODING, "identity")
            row.content_type = h.get(Header.CONTENT_TYPE, "?")
            sent, received = sent_ns[i], received_ns[i]
            if sent is not None and received is not None:
                row.latencies_ms.append((received - sent) / 1e6)
        self.gaps.observe(counted)

    def missing(self, publisher: str) -> int | None:
        return None if publisher in (UNSTAMPED, OTHERS) else self.gaps.missing_from(publisher)

    def table(self) -> Table:
        """The rows as wirepipe's one table model (``core/table.py``): the busiest ``SHOWN`` publishers, the
        notes beneath. On a narrow terminal the least telling columns go first; the publisher, its messages, rate
        and losses stay."""
        from ..core.table import Table, num

        busiest = sorted(self.rows.items(), key=lambda item: -item[1].messages)
        shown, hidden = busiest[:SHOWN], busiest[SHOWN:]
        notes = []
        if hidden:
            notes.append(f"... and {len(hidden):,} more publisher row(s), {sum(r.messages for _, r in hidden):,} "
                         f"messages (the {SHOWN} busiest are shown)")
        if UNSTAMPED in self.rows:
            notes.append(f"publisher {UNSTAMPED}: messages without Wirepipe-Publisher/Wirepipe-Seq (a JetStream "
                         "sink, another client): their losses cannot be counted here, missing shows -; a stream's "
                         "own sequence numbers tell them (nats stream info)")
        if OTHERS in self.rows:
            notes.append(f"{OTHERS}: publishers past the first {MAX_PUBLISHERS:,} ids, counted together; "
                         "their losses are not counted")
        rows = []
        for pid, row in sorted(shown):
            span = row.last - row.first
            wire = row.wire_bytes / row.messages if row.messages else 0.0
            raw = row.serialized_bytes / row.decoded if row.decoded else None
            many = f"{len(row.subjects)}{'+' if len(row.subjects) >= _SUBJECTS else ''} subjects"
            subjects = next(iter(row.subjects)) if len(row.subjects) == 1 else many
            rows.append([pid, subjects, row.content_type.removeprefix("application/"), row.encoding,
                         num(row.messages), f"{row.messages / span:,.0f}" if span > 0 else "-", f"{wire:,.1f}",
                         "-" if raw is None else f"{raw:,.1f}",
                         "-" if raw is None or not wire else f"{raw / wire:.2f}x",
                         _ms(row.percentile(0.5)), _ms(row.percentile(0.99)), num(self.missing(pid)),
                         num(row.undecoded)])
        return Table("wirepipe tap", list(COLUMNS), rows, numeric=[False] * 4 + [True] * (len(COLUMNS) - 4),
                     caption="\n".join(notes), priority=list(COLUMNS.values()))

    def text(self, width: int | None = None) -> str:
        """The table drawn for a terminal ``width`` wide (the terminal's when None): what the tap prints at its
        end and redraws live."""
        return self.table().text(width, elsewhere=None)


# The table's columns and their rank on a narrow terminal (0 always shown, higher left out first).
COLUMNS = {"publisher": 0, "subjects": 2, "format": 1, "codec": 1, "msgs": 0, "msg/s": 0, "B/rec wire": 1,
           "B/rec raw": 2, "raw/wire": 2, "p50 ms": 1, "p99 ms": 1, "missing": 0, "undecoded": 1}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
