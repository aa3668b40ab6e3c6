"""What a report's rows are grouped into, and the figures of one group.

A group is one pipeline run, the runs of one worker pool (its workers beneath it), one
labelled configuration of a bench (its iterations pooled), or a flow (a publisher and the
consumer that read its stream, ``flows``). Its figures per stage (``StageSummary``) and as a
whole: records, sizes, throughput, time per record, and the sums the NATS payload study
minimises, publish side = serialize + compress + publish and consume side = consume +
decompress + deserialize, each the sum of those stages' mean time per record (the stages a
pipeline has; an in-memory pipeline has no publish or consume stage). A group also knows the
YAML operators that run it (``snippet``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...core.stages import Stage
from .statistics import TimeStats, median_interval


@dataclass
class StageSummary:
    """One stage of one group: counts, busy time, sizes and time per record."""

    stage: str
    operator: str
    step: int
    params: dict[str, Any]
    batches: int
    records_in: int
    records: int
    rejected: int
    seconds: float
    bytes_in: int | None
    bytes_in_records: int
    bytes_out: int | None
    bytes_out_records: int
    time: TimeStats | None

    @property
    def records_per_s(self) -> float | None:
        return self.records_in / self.seconds if self.seconds > 0 else None

    @property
    def mb_per_s(self) -> float | None:
        """Payload MB/s through the stage, counted on the larger side (the uncompressed one for codecs)."""
        sizes = [b for b in (self.bytes_in, self.bytes_out) if b is not None]
        return max(sizes) / self.seconds / 1e6 if sizes and self.seconds > 0 else None

    @property
    def bytes_in_per_record(self) -> float | None:
        return self.bytes_in / self.bytes_in_records if self.bytes_in is not None and self.bytes_in_records else None

    @property
    def bytes_out_per_record(self) -> float | None:
        return (self.bytes_out / self.bytes_out_records
                if self.bytes_out is not None and self.bytes_out_records else None)

    @property
    def ratio(self) -> float | None:
        """Compression ratio (uncompressed / compressed) for compress and decompress stages."""
        i, o = self.bytes_in_per_record, self.bytes_out_per_record
        if not i or not o:
            return None
        if self.stage == Stage.COMPRESS:
            return i / o
        if self.stage == Stage.DECOMPRESS:
            return o / i
        return None


@dataclass
class Side:
    """A side's sum (publish or consume): the mean time per record of the stages of one side that the pipeline has."""

    ns_per_record: float
    stages: tuple[str, ...]


@dataclass
class GroupSummary:
    """One pipeline run (or one labelled configuration of several runs) and its stages."""

    label: str
    dataset: str
    pipelines: list[str]
    runs: list[str]
    stages: list[StageSummary]
    records_in: int
    records_out: int
    rejected: int
    wall_seconds: float
    time: TimeStats | None
    latency: dict[str, TimeStats] = field(default_factory=dict)
    latency_cdf: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)  # ns, fraction
    path_samples: list[float] = field(default_factory=list)  # publish + consume side, ns/record, per batch
    payload_digest: str | None = None  # of the serialized payloads (a bench measures it): equal = same bytes
    labelled: bool = False  # a bench's configuration (its stages ran one after another, not as one pipeline)
    span: tuple[int, int] | None = None  # its runs' first start to its rows' last end, Unix ns
    workers: list[GroupSummary] = field(default_factory=list)  # a pool's: one per worker (its restarts included)
    flow: tuple[GroupSummary, GroupSummary] | None = None  # a flow's publisher and consumer (see ``flows``)
    failed: str | None = None  # a bench's configuration that failed (its round trip, a loss): why; never a pick

    @property
    def path_median(self) -> float | None:
        """The robust figure to rank by: the median over batches (a bench: over iterations)."""
        if not self.path_samples:
            return self.path_ns_per_record
        return median_interval(self.path_samples)[0]

    @property
    def path_interval(self) -> tuple[float, float] | None:
        """A distribution-free ~95% confidence interval of that median (the range, with few samples)."""
        if not self.path_samples:
            return None
        _, lo, hi = median_interval(self.path_samples)
        return lo, hi

    @property
    def format(self) -> str | None:
        s = self._stage((Stage.SERIALIZE,))
        return s.operator if s is not None else None

    def same_bytes_key(self) -> tuple[str, str, str] | None:
        """Configurations with equal keys put the same bytes on the wire (same payloads, same codec steps)."""
        fmt, config = self.format, self.label.split(": ", 1)[-1]
        if self.payload_digest is None or fmt is None or not config.startswith(fmt):
            return None
        return self.dataset, self.payload_digest, config[len(fmt):]

    def _stage(self, kinds: tuple[str, ...], last: bool = False) -> StageSummary | None:
        found = [s for s in self.stages if s.stage in kinds]
        return (found[-1] if last else found[0]) if found else None

    def side(self, kinds: tuple[str, ...]) -> Side | None:
        found = [s for s in self.stages if s.stage in kinds and s.time is not None]
        if not found:
            return None
        return Side(sum(s.time.mean for s in found if s.time), tuple(s.stage for s in found))

    @property
    def publish_side(self) -> Side | None:
        return self.side(Stage.PUBLISH_SIDE)

    @property
    def consume_side(self) -> Side | None:
        return self.side(Stage.CONSUME_SIDE)

    @property
    def path_ns_per_record(self) -> float | None:
        """Publish side + consume side (the study's total); all stages when the pipeline has neither."""
        sides = [s.ns_per_record for s in (self.publish_side, self.consume_side) if s is not None]
        if sides:
            return sum(sides)
        return self.time.mean if self.time is not None else None

    @property
    def raw_bytes_per_record(self) -> float | None:
        s = self._stage((Stage.SERIALIZE,))
        return s.bytes_in_per_record if s is not None else None

    @property
    def serialized_bytes_per_record(self) -> float | None:
        s = self._stage((Stage.SERIALIZE,))
        if s is not None:
            return s.bytes_out_per_record
        s = self._stage((Stage.DESERIALIZE,))
        return s.bytes_in_per_record if s is not None else None

    @property
    def wire_bytes_per_record(self) -> float | None:
        """Payload bytes per record on the wire: after the last encode stage, or before the first decode."""
        s = self._stage(Stage.ENCODE, last=True)
        if s is not None:
            return s.bytes_out_per_record
        s = self._stage((Stage.CONSUME, *Stage.DECODE))
        if s is not None:
            return s.bytes_out_per_record if s.stage == Stage.CONSUME else s.bytes_in_per_record
        s = self._stage((Stage.PUBLISH,))
        return s.bytes_in_per_record if s is not None else None

    @property
    def ratio(self) -> float | None:
        s, w = self.serialized_bytes_per_record, self.wire_bytes_per_record
        return s / w if s and w else None

    @property
    def records_per_s(self) -> float | None:
        return self.records_out / self.wall_seconds if self.wall_seconds > 0 else None

    @property
    def mb_per_s(self) -> float | None:
        rate, wire = self.records_per_s, self.wire_bytes_per_record
        return rate * wire / 1e6 if rate is not None and wire is not None else None

    @property
    def chain(self) -> str | None:
        """The codec chain as ``format|codec:level``, from the encode stages (or fixed decode stages)."""
        encode = [s.operator for s in self.stages if s.stage in Stage.ENCODE]
        if encode:
            return "|".join(encode)
        decode = [s.operator for s in self.stages if s.stage in Stage.DECODE]
        if decode and "auto" not in decode:
            return "|".join(reversed(decode))
        return None

    @property
    def config(self) -> str:
        """How a pick is named: a bench configuration by its label (chain, +dict, xN/msg), a pipeline run
        by its name and chain."""
        if self.labelled:
            return self.label.removeprefix(f"{self.dataset}: ")
        return f"{self.label} ({self.chain})" if self.chain else self.label

    def snippet(self, width: int | None = None) -> str:
        """The YAML operators that run this configuration, publisher and consumer side.

        A plain chain is one ``encode``/``decode`` entry; a trained zstd dictionary or
        several records per message (a ``pack`` stage) are spelled out operator by operator.
        With a ``width``, a snippet with a longer line is written in block style (a list item
        per line), so a terminal never has to wrap, or cut, a line of config.
        """
        text = self._snippet()
        if width is None or max(map(len, text.splitlines())) <= width:
            return text
        import yaml

        out = []
        for part in text.split("# ")[1:]:
            title, _, body = part.partition("\n")
            data = yaml.safe_load(body)
            out += [f"# {title}", yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=width,
                                                 allow_unicode=True).rstrip()]
        return "\n".join(out)

    def _snippet(self) -> str:
        chain = self.chain
        if chain is None:
            return "# no codec chain in these rows: see the run's config in the results metadata"
        ser = self._stage((Stage.SERIALIZE,))
        schema = ser.params.get("schema") if ser is not None else None
        extra = f", schema: {json.dumps(schema)}" if schema else ""
        comp = self._stage((Stage.COMPRESS,))
        dictionary = comp.params.get("dictionary") if comp is not None else None
        pack = self._stage((Stage.PACK,))
        if not dictionary and pack is None:
            return (f"# publisher\noperators:\n  - encode: {{chain: \"{chain}\"{extra}}}\n"
                    f"# consumer\noperators:\n  - decode: {{chain: \"{chain}\"{extra}}}")
        fmt, _, codec_step = chain.partition("|")
        pub = [f"  - pack: {{records: {pack.params.get('records')}}}"] if pack is not None else []
        pub.append(f"  - serialize: {{format: {fmt}{extra}}}")
        con = []
        if codec_step:
            codec, _, level = codec_step.partition(":")
            d = f", dictionary: {json.dumps(dictionary)}" if dictionary else ""
            pub.append(f"  - compress: {{codec: {codec}, level: {level or 'default'}{d}}}")
            con.append(f"  - decompress: {{codec: {codec}{d}}}")
        con.append(f"  - deserialize: {{format: {fmt}{extra}}}")
        if pack is not None:
            con.append("  - unpack: {}")
        return "# publisher\noperators:\n" + "\n".join(pub) + "\n# consumer\noperators:\n" + "\n".join(con)
