"""Recommendations: per dataset, the fastest configuration, the smallest on the wire and the best for a link.

Ranked by the median (a bench: over iterations; robust to one slow one), each pick names
the configurations tied with it within noise (overlapping intervals of the median) and is
never a configuration that writes the same bytes as a faster one, nor one that failed (a bench's
failed combinations: ``GroupSummary.failed``). A dataset measured in one
configuration only gets its figures and no ranking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...core.table import num
from .groups import GroupSummary
from .statistics import overlaps

DEFAULT_BANDWIDTH = 100e6  # bits per second


KINDS = {"fastest": "fastest end to end", "smallest": "smallest on the wire", "bandwidth": "best for the link",
         "only": "one configuration measured"}  # a pick's kind, in words


@dataclass
class Recommendation:
    dataset: str
    kind: str  # fastest | smallest | bandwidth | only (the one configuration measured): KINDS
    group: GroupSummary
    why: str  # the figure that decided it, in words
    tied: list[GroupSummary] = field(default_factory=list)  # others within noise of it
    instead_of: GroupSummary | None = None  # a byte-identical, slower configuration the figures first picked

    @property
    def what(self) -> str:
        """The pick in words, as every report and table names it: ``fastest end to end``..."""
        return KINDS.get(self.kind, self.kind)

    @property
    def sureness(self) -> str:
        """How sure the pick is, in words: ties within noise and byte-identical swaps."""
        parts = []
        if self.tied:
            names = ", ".join(g.config for g in [self.group, *self.tied])
            parts.append(f"tied within noise: {names}")
        if self.instead_of is not None:
            parts.append(f"writes the same bytes as {self.instead_of.config}, faster")
        return "; ".join(parts)


def recommend(groups: list[GroupSummary], bandwidth_bps: float) -> list[Recommendation]:
    """Per dataset: the fastest configuration, the smallest, and the best for a link of ``bandwidth_bps``.

    Ranked by the median (robust to one slow iteration); the fastest names every configuration
    whose interval overlaps the winner's ("tied within noise"). A pick never names a slower
    configuration that writes the same bytes as a faster one (``json`` and ``orjson``): the
    faster one of the byte-identical group is recommended instead.
    """
    out: list[Recommendation] = []
    for dataset in dict.fromkeys(g.dataset for g in groups):
        cands = [g for g in groups if g.dataset == dataset and g.path_median is not None and not g.failed]
        if not cands:
            continue
        # one configuration measured (a bench's label; a pipeline's chain, however many runs): nothing to rank
        if len({g.config if g.labelled else g.chain or g.label for g in cands}) == 1:
            only = min(cands, key=lambda g: g.path_median or math.inf)
            out.append(Recommendation(dataset, "only", only, _only(only, bandwidth_bps)))
            continue
        fastest = min(cands, key=lambda g: (g.path_median, g.wire_bytes_per_record or math.inf))
        tied = [g for g in cands if g is not fastest and overlaps(g.path_interval, fastest.path_interval)]
        tied.sort(key=lambda g: g.path_median or 0.0)  # every candidate has one
        out.append(_fastest_of_same_bytes(Recommendation(dataset, "fastest", fastest, _speed(fastest), tied), cands))
        sized = [g for g in cands if g.wire_bytes_per_record is not None]
        if not sized:
            continue
        smallest = min(sized, key=lambda g: (g.wire_bytes_per_record, g.path_median))
        out.append(_fastest_of_same_bytes(Recommendation(
            dataset, "smallest", smallest, f"{num(smallest.wire_bytes_per_record)} bytes per record on the wire"),
            cands))
        best = max(sized, key=lambda g: (link_rate(g, bandwidth_bps), -(g.wire_bytes_per_record or 0.0)))
        out.append(_fastest_of_same_bytes(Recommendation(
            dataset, "bandwidth", best,
            f"~{link_rate(best, bandwidth_bps):,.0f} records/s sustained on {format_bandwidth(bandwidth_bps)} "
            f"(limited by {link_bottleneck(best, bandwidth_bps)})"), cands))
    return out


def _only(g: GroupSummary, bandwidth_bps: float) -> str:
    """The figures of the one configuration measured (the tables' own: its sides' sum), and how to compare it
    with others."""
    wire = f", {num(g.wire_bytes_per_record)} B per record on the wire" if g.wire_bytes_per_record else ""
    return (f"{num(g.path_ns_per_record, 1e3)} µs per record ({_sides(g)}){wire}, ~"
            f"{link_rate(g, bandwidth_bps):,.0f} records/s on {format_bandwidth(bandwidth_bps)}; the only "
            "configuration measured: `wirepipe bench --input FILE` on these records compares the others")


def _sides(g: GroupSummary) -> str:
    """What ``path_ns_per_record`` sums for this group, in words (the tables' "total")."""
    pub, con = g.publish_side is not None, g.consume_side is not None
    return ("publish + consume side" if pub and con else "publish side" if pub else "consume side" if con
            else "all stages")


def _speed(g: GroupSummary) -> str:
    """The figure a fastest pick is ranked by: the median over iterations with its interval, or with one
    sample, the group's sides' sum as its tables show it."""
    interval = g.path_interval
    if len(g.path_samples) < 2 or interval is None:
        return f"{num(g.path_ns_per_record, 1e3)} µs per record ({_sides(g)})"
    return (f"{num(g.path_median, 1e3)} [{num(interval[0], 1e3)}-{num(interval[1], 1e3)}] µs per record "
            f"(median of {len(g.path_samples)})")


def _fastest_of_same_bytes(rec: Recommendation, cands: list[GroupSummary]) -> Recommendation:
    """The pick, or the faster configuration that writes the same bytes (the figures stay the faster one's)."""
    key = rec.group.same_bytes_key()
    if key is None:
        return rec
    same = [g for g in cands if g.same_bytes_key() == key]
    faster = min(same, key=lambda g: g.path_median if g.path_median is not None else math.inf)
    if faster is rec.group:
        return rec
    why = _speed(faster) if rec.kind == "fastest" else rec.why
    tied = [g for g in rec.tied if g is not faster]
    return Recommendation(rec.dataset, rec.kind, faster, why, tied, instead_of=rec.group)


def _link_times(g: GroupSummary, bandwidth_bps: float) -> dict[str, float]:
    """Seconds per record of each part of a streaming path; they overlap, so the slowest sets the rate."""
    parts = {"publish side": g.publish_side, "consume side": g.consume_side}
    times = {k: v.ns_per_record / 1e9 for k, v in parts.items() if v is not None}
    if not times and g.path_ns_per_record is not None:
        times["pipeline"] = g.path_ns_per_record / 1e9
    times["the link"] = (g.wire_bytes_per_record or 0) * 8 / bandwidth_bps
    return times


def link_rate(g: GroupSummary, bandwidth_bps: float) -> float:
    """Records/s a publisher, a link of ``bandwidth_bps`` and a consumer sustain together."""
    slowest = max(_link_times(g, bandwidth_bps).values())
    return 1 / slowest if slowest > 0 else math.inf


def link_bottleneck(g: GroupSummary, bandwidth_bps: float) -> str:
    times = _link_times(g, bandwidth_bps)
    return max(times, key=lambda k: times[k])


def format_bandwidth(bps: float) -> str:
    """A link speed as people write it.

    >>> format_bandwidth(1e8), format_bandwidth(2.5e9), format_bandwidth(500)
    ('100 Mbit/s', '2.5 Gbit/s', '500 bit/s')
    """
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}/s"
    return f"{bps:g} bit/s"
