"""Flows: the publisher and the consumer of one stream, joined end to end.

A deployment runs a publishing pipeline (a file or a dataset -> serialize -> compress ->
publish) and a consuming one (consume -> decompress -> deserialize -> a sink), each writing
its own metrics. Read apart, neither says what the path costs: the publisher has no consume
side and the consumer does not know the records' origin (its source is a stream). A flow
joins them when the consumer reads what the publisher wrote:

- the same JetStream stream (the publisher's sink ``stream``, the consumer's source
  ``stream``), or a subject the consumer's filter matches (NATS wildcards ``*`` and ``>``);
- at overlapping times (each run's rows on its own clock, converted to Unix time).

A consumer joins the publisher it overlaps most; a publisher may feed several consumers.
The flow is one configuration: the publisher's dataset and chain, its publish side and the
consumer's consume side, records published and consumed, the consumer's latency.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...core.stages import Stage
from ...core.units import covered
from ...wire import subject_matches

if TYPE_CHECKING:
    from .groups import GroupSummary, StageSummary


def join_flows(groups: list[GroupSummary]) -> list[GroupSummary]:
    """A flow for each consumer that reads what a publisher of ``groups`` wrote (see the module doc)."""
    publishers = [(g, s) for g in groups if not g.labelled and (s := _stage(g, Stage.PUBLISH)) is not None]
    flows = []
    for consumer in groups:
        source = min(consumer.stages, key=lambda s: s.step) if consumer.stages and not consumer.labelled else None
        if source is None or source.stage != Stage.CONSUME:
            continue
        matched = [(overlap(p.span, consumer.span), p) for p, publish in publishers
                   if p is not consumer and _same_stream(publish, source)]
        matched = [(o, p) for o, p in matched if o > 0]
        if matched:
            flows.append(flow(max(matched, key=lambda m: m[0])[1], consumer))
    return flows


def flow(publisher: GroupSummary, consumer: GroupSummary) -> GroupSummary:
    """One configuration from the publisher's and the consumer's stages (the publisher's come first)."""
    spans = [s for s in (publisher.span, consumer.span) if s is not None]
    last = max((s.step for s in publisher.stages), default=0) + 1
    stages = [*publisher.stages, *(replace(s, step=s.step + last) for s in consumer.stages)]
    return replace(
        publisher, label=f"{publisher.label} -> {consumer.label}",
        pipelines=[*publisher.pipelines, *consumer.pipelines], runs=[*publisher.runs, *consumer.runs],
        stages=stages, records_out=consumer.records_out, rejected=publisher.rejected + consumer.rejected,
        wall_seconds=covered(spans) / 1e9, time=None, latency=consumer.latency, latency_cdf=consumer.latency_cdf,
        path_samples=[], span=(min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None,
        workers=[], flow=(publisher, consumer))


def overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> int:
    """Nanoseconds two spans share (0 when either is unknown or they do not meet)."""
    if a is None or b is None:
        return 0
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def _same_stream(publish: StageSummary, consume: StageSummary) -> bool:
    p, c = publish.params, consume.params
    if p.get("stream") and c.get("stream"):
        return bool(p["stream"] == c["stream"])
    return bool(p.get("subject") and c.get("subject") and subject_matches(str(c["subject"]), str(p["subject"])))


def _stage(g: GroupSummary, kind: str) -> StageSummary | None:
    return next((s for s in g.stages if s.stage == kind), None)
