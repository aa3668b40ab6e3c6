"""The study's tables, in the published benchmarks' shape, from measured combinations (the recommendation is
the report's).

Every time is as the published benchmarks give theirs: milliseconds for the N repetitions of one iteration, shown
as median [min-max] over the K iterations (the median, not the mean: one iteration slowed
by a busy machine does not move it); tables are sorted by it. Sizes are bytes per record (exact: the mean
over the repetitions of a deterministic sample). The publish side is serialize +
compress (+ publish), the consume side (consume +) decompress + deserialize.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.stages import Stage
from ...core.table import Table
from .combos import Combo


@dataclass
class Spread:
    """median [min-max] of one figure over iterations."""

    values: list[float]

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def median(self) -> float:
        import statistics

        return statistics.median(self.values)

    def __str__(self) -> str:
        if not self.values:
            return "n/a"
        return f"{self.median:.2f} [{min(self.values):.2f}-{max(self.values):.2f}]"


@dataclass
class Measured:
    """One combination's figures on one dataset."""

    dataset: str
    combo: Combo
    raw_bytes: float
    repetitions: int
    stages: dict[str, Spread] = field(default_factory=dict)  # ms per iteration
    size: float | None = None  # bytes per record after serialize
    compressed: float | None = None  # bytes per record after compress (= size without a codec)
    latency_ms: dict[str, float] = field(default_factory=dict)  # p50/p90/p99 end-to-end, per record
    error: str | None = None

    def side(self, stages: tuple[str, ...]) -> Spread | None:
        present = [self.stages[s] for s in stages if s in self.stages]
        if not present:
            return None
        return Spread([sum(vals) for vals in zip(*(p.values for p in present), strict=True)])

    @property
    def total(self) -> Spread | None:
        pub, con = self.side(Stage.PUBLISH_SIDE), self.side(Stage.CONSUME_SIDE)
        if pub is None or con is None:
            return None
        return Spread([a + b for a, b in zip(pub.values, con.values, strict=True)])

    @property
    def wire_bytes(self) -> float | None:
        return self.compressed if self.compressed is not None else self.size


def size_cell(size: float | None, raw: float) -> str:
    if size is None:
        return "n/a"
    pct = (size - raw) / raw * 100 if raw else 0.0
    text = f"{size:.0f}" if float(size).is_integer() else f"{size:.1f}"
    return f"{text} [{pct:+.0f}%]"


def format_table(rows: list[Measured]) -> Table:
    """Formats alone (no compression, one record per message), sorted by Ser+Deser."""
    ok = [m for m in rows if m.combo.codec == "none" and not m.error]
    ok.sort(key=lambda m: _ser_deser(m).median)
    header = ["Format", "Size (b) [±% vs raw]", "Ser. (ms)", "Deser. (ms)", "Ser+Deser. (ms)"]
    body = [[m.combo.label, size_cell(m.size, m.raw_bytes), str(m.stages[Stage.SERIALIZE]),
             str(m.stages[Stage.DESERIALIZE]), str(_ser_deser(m))] for m in ok]
    return _table("Formats", header, body)


def _ser_deser(m: Measured) -> Spread:
    return Spread([a + b for a, b in zip(m.stages[Stage.SERIALIZE].values, m.stages[Stage.DESERIALIZE].values, strict=True)])


def chain_table(rows: list[Measured]) -> Table:
    """Every combination with its compression (and transport) columns, sorted by total time."""
    ok = sorted((m for m in rows if not m.error), key=lambda m: m.total.median if m.total else float("inf"))
    transport = any(Stage.PUBLISH in m.stages for m in ok)
    header = ["Chain", "Size (b)", "Compressed (b) [±% vs raw]", "Ser. (ms)", "Comp. (ms)"]
    header += ["Publish (ms)", "Consume (ms)"] if transport else []
    header += ["Decomp. (ms)", "Deser. (ms)", "Publish-side sum (ms)", "Consume-side sum (ms)"]
    header += ["Latency p50 / p99 (ms)"] if transport else []
    body = []
    for m in ok:
        row = [m.combo.label, size_cell(m.size, m.raw_bytes).split(" ")[0], size_cell(m.wire_bytes, m.raw_bytes),
               _cell(m, Stage.SERIALIZE), _cell(m, Stage.COMPRESS)]
        row += [_cell(m, Stage.PUBLISH), _cell(m, Stage.CONSUME)] if transport else []
        row += [_cell(m, Stage.DECOMPRESS), _cell(m, Stage.DESERIALIZE), str(m.side(Stage.PUBLISH_SIDE)), str(m.side(Stage.CONSUME_SIDE))]
        if transport:
            lat = m.latency_ms
            row.append(f"{lat['p50']:.2f} / {lat['p99']:.2f}" if lat else "n/a")
        body.append(row)
    return _table("Formats with compression", header, body)


def _cell(m: Measured, stage: str) -> str:
    return str(m.stages[stage]) if stage in m.stages else "-"


def failures(rows: list[Measured]) -> list[tuple[str, str]]:
    return [(m.combo.label, m.error or "") for m in rows if m.error]


# Which columns a narrow terminal keeps (0 always; higher ranks are left out first): the sums, the size on
# the wire and the latency say what to pick, the single stages say why.
_RANK = {"Chain": 0, "Format": 0, "Compressed (b) [±% vs raw]": 0, "Size (b) [±% vs raw]": 0,
         "Ser+Deser. (ms)": 0, "Publish-side sum (ms)": 0, "Consume-side sum (ms)": 0,
         "Latency p50 / p99 (ms)": 1, "Size (b)": 3, "Publish (ms)": 2, "Consume (ms)": 2}


def _table(title: str, header: list[str], body: list[list[str]]) -> Table:
    return Table(title, header, body, priority=[_RANK.get(h, 4) for h in header])
