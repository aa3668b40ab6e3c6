"""The numbers of a report, computed from Arrow tables of stage and latency rows.

Everything here is plain arithmetic on the columns ``MetricsRecorder`` writes, so any
caller with rows of that schema (``wirepipe bench`` with its own runs, a notebook) gets
the same figures as ``wirepipe report``. Rows are grouped by a ``label`` column when
the table has one (a benchmark labels each configuration), else by run.

Time per record of a stage comes from per-batch rows: each batch row gives one value,
``(end_ns - start_ns) / records entering the stage``, which stands for every record of
that batch. Mean and standard deviation weigh each batch by its records (the mean is
exactly total stage time / records); percentiles are taken over the records, each
record carrying its batch's value, with the "inverted CDF" rule (the smallest value
that at least q of the records do not exceed, DuckDB's ``quantile_disc``). So they
describe how batches vary, not how records inside one batch vary: a per-batch stamp
cannot see that. Latency percentiles are exact: latency rows are per record.

The seed study's sums: publish side = serialize + compress + publish, consume side =
consume + decompress + deserialize, each the sum of those stages' mean time per record
(the stages a pipeline has; an in-memory pipeline has no publish or consume stage).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..core.stages import Stage
from ..core.units import covered
from .flows import join_flows
from .results import RunInfo

QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))
DEFAULT_BANDWIDTH = 100e6  # bits per second


@dataclass(frozen=True)
class TimeStats:
    """Distribution of a time (ns) over ``count`` records."""

    count: int
    mean: float
    std: float
    min: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    def get(self, name: str) -> float:
        return getattr(self, name.replace("p99.9", "p999"))


def time_stats(values: Any, weights: Any = None) -> TimeStats | None:
    """Weighted mean, population std, min, max and inverted-CDF percentiles (None when empty)."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    w = np.ones(len(v), dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    keep = (w > 0) & np.isfinite(v)
    v, w = v[keep], w[keep]
    if not len(v):
        return None
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    cum = np.cumsum(w)
    total = int(cum[-1])
    mean = float(np.dot(v, w) / total)
    std = float(math.sqrt(max(float(np.dot(w, (v - mean) ** 2)) / total, 0.0)))

    def quantile(q: float) -> float:
        k = max(math.ceil(total * Fraction(str(q))), 1)  # exact: 0.9 * 10 is 9, not 9.000000000000002
        return float(v[int(np.searchsorted(cum, k, side="left"))])

    p50, p90, p99, p999 = (quantile(q) for _, q in QUANTILES)
    return TimeStats(total, mean, std, float(v[0]), p50, p90, p99, p999, float(v[-1]))


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the order statistics that hold the median with ``confidence``, distribution-free.

    With n values the interval is [x(j), x(n-j+1)] for the largest j whose binomial tail
    P(B(n, 1/2) < j) <= (1 - confidence) / 2; with fewer than 6 values that is the whole range
    (the most a handful of iterations can say).
    """
    v = sorted(values)
    n = len(v)
    mid = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    tail, j, cumulative = (1 - confidence) / 2, 0, 0.0
    while j < n // 2:
        cumulative += math.comb(n, j) / 2 ** n
        if cumulative > tail:
            break
        j += 1
    j = max(j, 1)  # 1-based rank of the low end
    return mid, v[j - 1], v[n - j]


def overlaps(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool:
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


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
    """A seed-study sum: the mean time per record of the stages of one side that the pipeline has."""

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
        """Publish side + consume side (the seed's total); all stages when the pipeline has neither."""
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


@dataclass
class Recommendation:
    dataset: str
    kind: str  # fastest | smallest | bandwidth | only (the one configuration measured)
    group: GroupSummary
    why: str  # the figure that decided it, in words
    tied: list[GroupSummary] = field(default_factory=list)  # others within noise of it
    instead_of: GroupSummary | None = None  # a byte-identical, slower configuration the figures first picked

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


@dataclass
class Report:
    groups: list[GroupSummary]
    recommendations: list[Recommendation]
    runs: dict[str, RunInfo]
    bandwidth_bps: float
    notes: list[str] = field(default_factory=list)
    flows: list[GroupSummary] = field(default_factory=list)  # publisher and consumer of one stream, joined
    failed_starts: list[RunInfo] = field(default_factory=list)  # runs that stopped before their parts opened
    failures: dict[str, str] = field(default_factory=dict)  # a bench's failed combinations and why

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(g.dataset for g in self.groups))


# --- computing ---------------------------------------------------------------------------------


def summarize(stages: Any, latency: Any = None, runs: dict[str, RunInfo] | None = None, *,
              bandwidth_bps: float = DEFAULT_BANDWIDTH) -> Report:
    """Every figure of a report from stage rows (and latency rows, if any)."""
    import numpy as np
    import pyarrow.compute as pc

    runs = dict(runs or {})
    t = stages
    n = t.num_rows
    run_ids = _codes(t.column("run_id"))
    run_names = run_ids[1]
    for r in run_names:
        runs.setdefault(r, RunInfo(r))
    group_codes, group_names, labelled = _labels(t, run_ids, runs)
    step = _steps(t, run_ids[0])
    stage = t.column("stage").to_pylist()
    operator = t.column("operator").to_pylist()
    params = t.column("params").to_pylist() if "params" in t.column_names else ["{}"] * n
    batch = _int(t, "batch")
    records = _int(t, "records")
    rejected = _int(t, "rejected")
    start, end = _int(t, "start_ns"), _int(t, "end_ns")
    dur = (end - start).astype(np.float64)
    n_in = records + rejected
    bytes_in = t.column("bytes_in")
    bytes_out = t.column("bytes_out")
    has_in = pc.is_valid(bytes_in).to_numpy(zero_copy_only=False)
    has_out = pc.is_valid(bytes_out).to_numpy(zero_copy_only=False)
    b_in = bytes_in.fill_null(0).to_numpy().astype(np.int64)
    b_out = bytes_out.fill_null(0).to_numpy().astype(np.int64)
    datasets = t.column("dataset").to_pylist() if "dataset" in t.column_names else None
    digests = t.column("payload_digest").to_pylist() if "payload_digest" in t.column_names else [None] * n
    on_path = np.isin(np.asarray(stage, dtype=object), np.asarray(Stage.PUBLISH_SIDE + Stage.CONSUME_SIDE, dtype=object))

    offset_of = np.asarray([runs[r].clock_offset for r in run_names], dtype=np.int64)
    start_u, end_u = start + offset_of[run_ids[0]], end + offset_of[run_ids[0]]  # one clock for every run

    def build(label: str, rows: Any) -> GroupSummary:
        g_runs = sorted(set(run_ids[0][rows].tolist()))
        # stage keys in run order, then step order
        keys: dict[tuple[int, str, str], list[int]] = {}
        order = sorted(rows.tolist(), key=lambda i: (g_runs.index(run_ids[0][i]), step[i], i))
        for i in order:
            keys.setdefault((int(step[i]), stage[i], operator[i]), []).append(i)
        summaries = []
        for (st, kind, op), idx_list in keys.items():
            idx = np.asarray(idx_list)
            ni = n_in[idx]
            per = np.divide(dur[idx], ni, out=np.full(len(idx), np.nan), where=ni > 0)
            summaries.append(StageSummary(
                stage=kind, operator=op, step=st, params=_json(params[idx_list[0]]), batches=len(idx),
                records_in=int(ni.sum()), records=int(records[idx].sum()), rejected=int(rejected[idx].sum()),
                seconds=float(dur[idx].sum()) / 1e9,
                bytes_in=int(b_in[idx][has_in[idx]].sum()) if has_in[idx].any() else None,
                bytes_in_records=int(ni[has_in[idx]].sum()),
                bytes_out=int(b_out[idx][has_out[idx]].sum()) if has_out[idx].any() else None,
                bytes_out_records=int(records[idx][has_out[idx]].sum()),
                time=time_stats(per, ni),
            ))
        # pipeline level: per run and per batch
        records_in_total = records_out = 0
        spans = []
        is_labelled = bool(labelled[rows[0]])
        for r in g_runs:
            rr = rows[run_ids[0][rows] == r]
            # A bench's configuration ran its stages one after another, sharing some rows' times with
            # others (serialize is timed once per format): its time is its own stages' time, not a span.
            if is_labelled:
                spans.append((0, int(dur[rr].sum())))
            else:
                spans.append((int(start_u[rr].min()), int(end_u[rr].max())))
            first, last = step[rr].min(), step[rr].max()
            records_in_total += int(n_in[rr][step[rr] == first].sum())
            records_out += int(records[rr][step[rr] == last].sum())
        # the runs of a pool work at the same time: their time is the union of their spans, not the sum
        wall = (sum(hi - lo for lo, hi in spans) if is_labelled else covered(spans)) / 1e9
        key = run_ids[0][rows].astype(np.int64) * (1 << 40) + batch[rows]
        _, inverse = np.unique(key, return_inverse=True)
        per_batch_time = np.bincount(inverse, weights=dur[rows])
        per_batch_n = np.zeros(len(per_batch_time), dtype=np.int64)
        np.maximum.at(per_batch_n, inverse, n_in[rows])
        per_rec = np.divide(per_batch_time, per_batch_n, out=np.full(len(per_batch_n), np.nan),
                            where=per_batch_n > 0)
        path_mask = on_path[rows]
        path_time = np.bincount(inverse, weights=np.where(path_mask, dur[rows], 0.0), minlength=len(per_batch_n))
        path_rec = per_rec if not path_mask.any() else np.divide(
            path_time, per_batch_n, out=np.full(len(per_batch_n), np.nan), where=per_batch_n > 0)
        digest = next((digests[i] for i in rows.tolist() if digests[i]), None)
        # from when its runs started (a consumer waits for its publisher before its first batch)
        started = [runs[run_names[r]].started_ns for r in g_runs if runs[run_names[r]].started_ns]
        pipelines = sorted({str(p) for p in t.column("pipeline").take(rows).unique().to_pylist()})
        dataset = (datasets[int(rows[0])] if datasets is not None and datasets[int(rows[0])] is not None
                   else _dataset(summaries))
        return GroupSummary(
            label=label, dataset=dataset, pipelines=pipelines, runs=[run_names[r] for r in g_runs],
            stages=summaries, records_in=records_in_total, records_out=records_out,
            rejected=int(rejected[rows].sum()), wall_seconds=wall, time=time_stats(per_rec, per_batch_n),
            path_samples=[float(x) for x in path_rec if np.isfinite(x)], payload_digest=digest,
            labelled=is_labelled, span=(min([int(start_u[rows].min()), *started]), int(end_u[rows].max())))

    groups: list[GroupSummary] = []
    worker_of = np.asarray([runs[r].worker.get("index", -1) if runs[r].worker else -1 for r in run_names])
    for g, label in enumerate(group_names):
        rows = np.flatnonzero(group_codes == g)
        group = build(label, rows)
        workers = worker_of[run_ids[0][rows]]
        if not labelled[rows[0]] and (workers >= 0).any():  # a pool: each worker beneath it
            group.workers = [build(f"w{w}", rows[workers == w]) for w in sorted(set(workers.tolist()))]
        groups.append(group)

    notes: list[str] = []
    if latency is not None and latency.num_rows:
        _add_latency([*groups, *(w for g in groups for w in g.workers)], latency, notes)
    flows = join_flows(groups)
    joined = {id(member) for f in flows if f.flow for member in f.flow}
    candidates = [*flows, *(g for g in groups if id(g) not in joined)]
    recorded = set(run_names)
    failed = [r for r in runs.values() if r.run_id not in recorded and not r.opened]
    failures = {k: v for r in runs.values() for k, v in r.failures.items()}
    return Report(groups, recommend(candidates, bandwidth_bps), runs, bandwidth_bps, notes, flows, failed,
                  failures)


def _add_latency(groups: list[GroupSummary], latency: Any, notes: list[str]) -> None:
    """Exact per-record latency figures of each group: transit (sent -> received) and end to end (sent -> done)."""
    import numpy as np
    import pyarrow.compute as pc

    labels = latency.column("label").to_pylist() if "label" in latency.column_names else None
    run_col = np.asarray(latency.column("run_id").to_pylist(), dtype=object)
    sent_valid = pc.is_valid(latency.column("sent_ns")).to_numpy(zero_copy_only=False)
    recv_valid = pc.is_valid(latency.column("received_ns")).to_numpy(zero_copy_only=False)
    if missing := int((~sent_valid).sum()):
        notes.append(f"{missing} latency row(s) without Wirepipe-Sent-At are left out of the latency figures")
    sent, received, done = (_int(latency, k) for k in ("sent_ns", "received_ns", "done_ns"))
    owner = np.asarray(labels, dtype=object) if labels is not None else None
    for g in groups:
        # a bench labels its latency rows; a pipeline's are its runs' (a pool worker's, its own runs')
        mine = ((owner == g.label) if owner is not None else np.isin(run_col, g.runs)) & sent_valid
        if not mine.any():
            continue
        for name, mask, until in (("transit", mine & recv_valid, received), ("end_to_end", mine, done)):
            values = until[mask] - sent[mask]
            stats = time_stats(values)
            if stats is not None:
                g.latency[name] = stats
                g.latency_cdf[name] = cdf_points(values)
    if any(s.min < 0 for g in groups for s in g.latency.values()):
        notes.append("some latencies are negative: the publisher's and the consumer's clocks disagree "
                     "(sync them with NTP/PTP, or read the figures as relative)")


def cdf_points(values: Any, points: int = 2000) -> tuple[list[float], list[float]]:
    """At most ``points`` (value, fraction of values <= it) pairs of an empirical CDF, ends included."""
    import numpy as np

    v = np.sort(np.asarray(values, dtype=np.float64))
    n = len(v)
    idx = np.unique(np.linspace(0, n - 1, min(points, n)).round().astype(np.int64))
    return v[idx].tolist(), ((idx + 1) / n).tolist()


def recommend(groups: list[GroupSummary], bandwidth_bps: float) -> list[Recommendation]:
    """Per dataset: the fastest configuration, the smallest, and the best for a link of ``bandwidth_bps``.

    Ranked by the median (robust to one slow iteration); the fastest names every configuration
    whose interval overlaps the winner's ("tied within noise"). A pick never names a slower
    configuration that writes the same bytes as a faster one (``json`` and ``orjson``): the
    faster one of the byte-identical group is recommended instead.
    """
    out: list[Recommendation] = []
    for dataset in dict.fromkeys(g.dataset for g in groups):
        cands = [g for g in groups if g.dataset == dataset and g.path_median is not None]
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
            dataset, "smallest", smallest, f"{smallest.wire_bytes_per_record:.4g} bytes per record on the wire"),
            cands))
        best = max(sized, key=lambda g: (link_rate(g, bandwidth_bps), -(g.wire_bytes_per_record or 0.0)))
        out.append(_fastest_of_same_bytes(Recommendation(
            dataset, "bandwidth", best,
            f"~{link_rate(best, bandwidth_bps):,.0f} records/s sustained on {format_bandwidth(bandwidth_bps)} "
            f"(limited by {link_bottleneck(best, bandwidth_bps)})"), cands))
    return out


def _only(g: GroupSummary, bandwidth_bps: float) -> str:
    """The figures of the one configuration measured, and how to compare it with others."""
    wire = f", {g.wire_bytes_per_record:.4g} B per record on the wire" if g.wire_bytes_per_record else ""
    return (f"{(g.path_median or 0.0) / 1e3:.3g} µs per record (publish + consume side){wire}, ~"
            f"{link_rate(g, bandwidth_bps):,.0f} records/s on {format_bandwidth(bandwidth_bps)}; the only "
            "configuration measured: `wirepipe bench --input FILE` on these records compares the others")


def _speed(g: GroupSummary) -> str:
    median = g.path_median or 0.0
    interval = g.path_interval
    spread = f" [{interval[0] / 1e3:.3g}-{interval[1] / 1e3:.3g}]" if interval and len(g.path_samples) > 1 else ""
    what = f"median of {len(g.path_samples)}" if len(g.path_samples) > 1 else "publish + consume side"
    return f"{median / 1e3:.3g}{spread} µs per record ({what})"


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


# --- helpers -------------------------------------------------------------------------------------


def _int(t: Any, name: str) -> Any:
    import numpy as np

    return t.column(name).fill_null(0).to_numpy().astype(np.int64)


def _codes(column: Any) -> tuple[Any, list[str]]:
    """Dictionary codes (numpy) and values of a string column."""
    import numpy as np
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(column.fill_null("")).combine_chunks()
    return enc.indices.to_numpy().astype(np.int64), [str(v) for v in enc.dictionary.to_pylist()]


def _labels(t: Any, run_ids: tuple[Any, list[str]], runs: dict[str, RunInfo]) -> tuple[Any, list[str], Any]:
    """Group of each row, the groups' names, and whether each row is a labelled (bench) row.

    A row with a ``label`` (a bench's configuration) belongs to that label in its run; a row
    without one (a pipeline's metrics) to its run, named after its pipeline; the runs of one
    worker pool are one group (``events [2 workers]``: its workers' runs, restarts included).
    Names that occur in several runs get the run's last 6 characters (``quickstart #a1b2c3``),
    so results of several runs are never merged into one row. Groups come in run start order,
    then table order.
    """
    import numpy as np

    codes, names = run_ids
    n = t.num_rows
    label = t.column("label").to_pylist() if "label" in t.column_names else [None] * n
    pipeline = t.column("pipeline").to_pylist()
    pools: dict[str, int] = {}  # a pool's id -> the code of its first run, which stands for all of them
    pool_of = [pools.setdefault(str(runs[r].worker["pool"]), c) if runs[r].worker.get("pool") else c
               for c, r in enumerate(names)]
    keys: dict[tuple[int, str, bool], int] = {}
    row_group = np.empty(n, dtype=np.int64)
    for i in range(n):
        lab = label[i]
        key = (int(codes[i]), lab, True) if lab else (pool_of[int(codes[i])], str(pipeline[i]), False)
        row_group[i] = keys.setdefault(key, len(keys))
    runs_of: dict[tuple[str, bool], set[int]] = {}
    for run, name, is_label in keys:
        runs_of.setdefault((name, is_label), set()).add(run)

    def shown(run: int, name: str, is_label: bool) -> str:
        workers = runs[names[run]].worker.get("workers") if not is_label else None
        base = f"{name} [{workers} workers]" if workers else name
        return base if len(runs_of[(name, is_label)]) == 1 else f"{base} #{names[run][-6:]}"

    display = [shown(*key) for key in keys]
    first = {g: i for i, g in reversed(list(enumerate(row_group.tolist())))}
    key_list = list(keys)
    order = sorted(range(len(keys)), key=lambda g: (runs[names[key_list[g][0]]].started_ns, first[g]))
    remap = np.empty(len(keys), dtype=np.int64)
    remap[order] = np.arange(len(keys))
    labelled = np.asarray([bool(label[i]) for i in range(n)], dtype=bool)
    return remap[row_group], [display[g] for g in order], labelled


def _steps(t: Any, runs: Any) -> Any:
    """The ``step`` column; rows without one get their position inside their batch, in table order."""
    import numpy as np

    n = t.num_rows
    if "step" in t.column_names and t.column("step").null_count == 0:
        return t.column("step").to_numpy().astype(np.int64)
    known = t.column("step").to_numpy(zero_copy_only=False) if "step" in t.column_names else [None] * n
    batch = _int(t, "batch")
    seen: dict[tuple[int, int], int] = {}
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = (int(runs[i]), int(batch[i]))
        pos = seen.get(k, 0)
        seen[k] = pos + 1
        v = known[i]
        out[i] = pos if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)
    return out


def _json(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _dataset(stages: list[StageSummary]) -> str:
    """What the records were: the generate source's dataset, else the source's subject, file name (not its
    folders: a heading, not a location) or stream, else its type."""
    source = min(stages, key=lambda s: s.step)
    p = source.params
    for key in ("dataset", "subject", "path", "stream"):
        if p.get(key):
            return str(p[key]).rstrip("/").rsplit("/", 1)[-1] if key == "path" else str(p[key])
    return source.operator
