"""The tap's sink: each message decoded from its headers, filtered, sampled, printed as a JSON line.

A message that does not decode (no or an unknown ``Content-Type``, a corrupt frame, a format that
carries no schema on the wire when no ``--schema`` was given) is counted with its reason; the first
message of each reason is named on stderr, and ``--raw`` prints every one as a JSON line with the
reason and the payload in hex.

What it prints is bounded whatever a publisher sends: a line is at most about ``MAX_LINE`` characters.
``--raw`` shows the first ``MAX_LINE // 2`` bytes of a payload in hex and ``cut``, the bytes not shown; a
decoded record whose JSON is longer is shown as ``{"subject", "cut": N, "head": "<its first MAX_LINE
characters>"}`` (N: the characters not shown), still one JSON line.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..connectors.connector import Sink
from ..core.batch import Batch
from ..core.fields import Condition, plain
from ..core.stages import Stage
from ..operators.by_headers import SERIALIZED_SIZE, HeaderDecoder
from .live import TapStats

MAX_LINE = 64 * 1024  # characters of one printed message, about: a tap is read by people and by jq
NO_SCHEMA = "give --schema (a dataset name, a schema file such as points.proto#Point, or module:Class)"


def _column(value: Any, n: int) -> list[Any]:
    return [value] * n if value is None or isinstance(value, (str, dict)) else list(value)


class TapSink(Sink):
    """Prints what it is given; never refuses a record (a tap must not dead-letter what it only watches)."""

    type = "tap"
    stage = Stage.WRITE

    def __init__(self, out: TextIO | None = None, *, schema: Any = None, allow_pickle: bool = False,
                 filters: Sequence[Condition] = (), sample: int = 1, limit: int | None = None, raw: bool = False,
                 envelope: bool = False, stats: TapStats | None = None, lines: bool = True,
                 err: TextIO | None = None, announce: str | None = None, dictionaries: str | None = None) -> None:
        """``announce`` is said on ``err`` once the source listens (a script waits for it before publishing);
        ``dictionaries`` (``nats://BUCKET``) is the store the zstd dictionaries frames name are fetched from (the
        bucket, reached as the tap's source is)."""
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.decoder = HeaderDecoder(schema, allow_pickle=allow_pickle, no_schema=NO_SCHEMA, dictionaries=dictionaries)
        self._resources: Any = None  # the decoder's dictionary and schema stores, once the source is known
        self._parts: tuple[Any, ...] = ()
        self.filters = list(filters)
        self.sample = sample
        self.limit = limit
        self.raw = raw
        self.envelope = envelope
        self.stats = stats
        self.lines = lines  # False: the table only
        self.messages = 0
        self.matched = 0
        self.shown = 0
        self.undecoded: Counter[str] = Counter()
        self.done = False
        self.announce = announce
        self._live: Any = None
        self.on_done: Callable[[], None] = lambda: None  # set by the tap: stop the source at --limit

    def bind(self, pipeline: str, source: Any) -> None:
        """The decoder's dictionary store, as a pipeline hands an operator its store: it reaches the server as the
        source does (its URL, auth, TLS)."""
        from ..pipelines.resources import Resources

        self._resources = Resources()
        self._resources.bind([self.decoder], (source,), ["tap"])
        self._parts = (source,)

    async def open(self) -> None:
        """The source listens already (the run loop opens it first): say so; with the table on a terminal,
        redraw it live (once a second) until the tap stops."""
        if self._resources is not None:
            await self._resources.open_operators([self.decoder], self._parts)
        if self.announce:
            print(self.announce, file=self.err, flush=True)
        if self.stats is not None and not self.lines and self.out.isatty():
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            stats, console = self.stats, Console(file=self.out)
            self._live = Live(get_renderable=lambda: Text(stats.text(console.width)), console=console,
                              refresh_per_second=1, transient=False)
            self._live.start()

    async def close(self) -> None:
        """The table as it ends: the live one's last frame, or printed once where there is no terminal."""
        if self._resources is not None:
            await self._resources.close_operators()
        if self.stats is None or self.lines:
            return
        if self._live is not None:
            self._live.stop()
            return
        print(self.stats.text(), file=self.out, end="", flush=True)

    async def write(self, batch: Batch) -> None:
        n = len(batch.values)
        if not n or self.done:
            return
        payloads = batch.values
        subjects = _column(batch.subjects, n)
        headers = _column(batch.headers, n)
        work = Batch(list(payloads), subjects=subjects, headers=headers, meta={"i": range(n)})
        await self.decoder.prepare(work)
        work = self.decoder(work)
        index = list(work.meta["i"])
        values = dict(zip(index, work.values, strict=True))
        sizes = dict(zip(index, work.meta[SERIALIZED_SIZE], strict=True))
        why = {r.meta["i"]: f"{r.stage}: {r.error}" for r in work.rejected}
        self.messages += n
        if self.stats is not None:
            meta = batch.meta
            self.stats.observe(payloads, subjects, headers, meta.get("sent_ns") or [None] * n,
                               meta.get("received_ns") or [None] * n, sizes, set(why))
        printed: list[str] = []
        for i in range(n):
            reason = why.get(i)
            if reason is not None:
                self.undecoded[reason] += 1
                if self.undecoded[reason] == 1 and not self.raw:
                    print(f"tap: not decoded ({reason}), e.g. on {subjects[i]}: --raw prints such messages "
                          "in hex", file=self.err)
                if self.filters or not self.raw:
                    continue
            elif not all(c(values[i]) for c in self.filters):
                continue
            self.matched += 1
            if (self.matched - 1) % self.sample:
                continue
            self.shown += 1
            if self.lines:
                printed.append(self._line(payloads[i], values.get(i), reason, subjects[i], headers[i]))
            if self.limit is not None and self.shown >= self.limit:
                self.done = True
                break
        if printed:
            try:
                self.out.write("\n".join(printed) + "\n")
                self.out.flush()
            except BrokenPipeError:  # `wirepipe tap ... | head`: the reader is gone
                self.done = True
        if self.done:
            self.on_done()

    def _line(self, payload: bytes, value: Any, reason: str | None, subject: str | None,
              headers: dict[str, str] | None) -> str:
        import orjson

        if reason is not None:
            shown = memoryview(payload)[: MAX_LINE // 2]
            line: dict[str, Any] = {"subject": subject, "error": reason, "size": len(payload), "hex": shown.hex()}
            if len(shown) < len(payload):
                line["cut"] = len(payload) - len(shown)  # bytes not shown
            if self.envelope:
                line["headers"] = headers
            return orjson.dumps(line).decode()
        record = plain(value)
        if self.envelope:
            record = {"value": record, "subject": subject, "headers": headers}
        text = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS).decode()
        if len(text) <= MAX_LINE:
            return text
        head = text[:MAX_LINE]
        while len(orjson.dumps(head)) > MAX_LINE:  # its quotes and control characters escaped again
            head = head[: len(head) // 2]
        return orjson.dumps({"subject": subject, "cut": len(text) - len(head), "head": head}).decode()

    def summary(self) -> str:
        text = f"tap: {self.messages:,} messages, {self.shown:,} shown"
        if self.undecoded:
            total = sum(self.undecoded.values())
            reasons = "; ".join(f"{count:,} x {reason}" for reason, count in self.undecoded.most_common(5))
            text += f", {total:,} not decoded ({reasons})"
        return text
