"""A report's figures, computed from Arrow tables of stage and latency rows.

Everything here is plain arithmetic on the columns ``MetricsRecorder`` writes, so any
caller with rows of that schema (``wirepipe bench`` with its own runs, a notebook) gets
the same figures as ``wirepipe report``. Rows are grouped by a ``label`` column when
the table has one (a benchmark labels each configuration), else by run (``groups``);
the figures of a group are ``groups.GroupSummary``'s, its statistics ``statistics``'s;
publishers and consumers are joined into flows (``flows``) and each dataset gets its
recommendations (``recommend``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ...core.stages import Stage
from ...core.units import covered
from .flows import join_flows
from .groups import GroupSummary, StageSummary
from .recommend import DEFAULT_BANDWIDTH, Recommendation, recommend
from .results import RunInfo
from .statistics import cdf_points, time_stats


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
    samples: dict[str, str] = field(default_factory=dict)  # a bench's datasets: what was measured, in words

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(g.dataset for g in self.groups))


# --- computing ---------------------------------------------------------------------------------


def summarize(stages: Any, latency: Any = None, runs: dict[str, RunInfo] | None = None, *,
              bandwidth_bps: float = DEFAULT_BANDWIDTH) -> Report:
    """Every figure of a report from stage rows (and latency rows, if any)."""
    rows = _Rows(stages, dict(runs or {}))
    groups = rows.groups()
    notes: list[str] = []
    if latency is not None and latency.num_rows:
        _add_latency([*groups, *(w for g in groups for w in g.workers)], latency, notes)
    flows = join_flows(groups)
    joined = {id(member) for f in flows if f.flow for member in f.flow}
    candidates = [*flows, *(g for g in groups if id(g) not in joined)]
    recorded = set(rows.run_names)
    failed = [r for r in rows.runs.values() if r.run_id not in recorded and not r.opened]
    failures = {k: v for r in rows.runs.values() for k, v in r.failures.items()}
    samples = {k: v for r in rows.runs.values() for k, v in r.samples.items()}
    return Report(groups, recommend(candidates, bandwidth_bps), rows.runs, bandwidth_bps, notes, flows, failed,
                  failures, samples)


class _Rows:
    """The stage rows' columns, read once as arrays, and the groups they make (``groups``)."""

    def __init__(self, t: Any, runs: dict[str, RunInfo]) -> None:
        import numpy as np
        import pyarrow.compute as pc

        n = t.num_rows
        self.table, self.runs = t, runs
        self.run_codes, self.run_names = _codes(t.column("run_id"))
        for r in self.run_names:
            runs.setdefault(r, RunInfo(r))
        self.group_codes, self.group_names, self.labelled = _labels(t, (self.run_codes, self.run_names), runs)
        self.step = _steps(t, self.run_codes)
        self.stage = t.column("stage").to_pylist()
        self.operator = t.column("operator").to_pylist()
        self.params = t.column("params").to_pylist() if "params" in t.column_names else ["{}"] * n
        self.batch = _int(t, "batch")
        self.records = _int(t, "records")
        self.rejected = _int(t, "rejected")
        start, end = _int(t, "start_ns"), _int(t, "end_ns")
        self.dur = (end - start).astype(np.float64)
        self.n_in = self.records + self.rejected
        bytes_in, bytes_out = t.column("bytes_in"), t.column("bytes_out")
        self.has_in = pc.is_valid(bytes_in).to_numpy(zero_copy_only=False)
        self.has_out = pc.is_valid(bytes_out).to_numpy(zero_copy_only=False)
        self.b_in = bytes_in.fill_null(0).to_numpy().astype(np.int64)
        self.b_out = bytes_out.fill_null(0).to_numpy().astype(np.int64)
        self.datasets = t.column("dataset").to_pylist() if "dataset" in t.column_names else None
        self.digests = t.column("payload_digest").to_pylist() if "payload_digest" in t.column_names else [None] * n
        self.on_path = np.isin(np.asarray(self.stage, dtype=object),
                               np.asarray(Stage.PUBLISH_SIDE + Stage.CONSUME_SIDE, dtype=object))
        offset_of = np.asarray([runs[r].clock_offset for r in self.run_names], dtype=np.int64)
        # one clock for every run
        self.start_u, self.end_u = start + offset_of[self.run_codes], end + offset_of[self.run_codes]

    def groups(self) -> list[GroupSummary]:
        """A group per run, pool or label, in run start order; a pool's workers beneath it."""
        import numpy as np

        runs = self.runs
        worker_of = np.asarray([runs[r].worker.get("index", -1) if runs[r].worker else -1 for r in self.run_names])
        out = []
        for g, label in enumerate(self.group_names):
            rows = np.flatnonzero(self.group_codes == g)
            group = self.group(label, rows)
            workers = worker_of[self.run_codes[rows]]
            if not self.labelled[rows[0]] and (workers >= 0).any():  # a pool: each worker beneath it
                group.workers = [self.group(f"w{w}", rows[workers == w]) for w in sorted(set(workers.tolist()))]
            out.append(group)
        return out

    def group(self, label: str, rows: Any) -> GroupSummary:
        """The figures of the rows ``rows`` (indexes) as one group."""
        import numpy as np

        g_runs = sorted(set(self.run_codes[rows].tolist()))
        stages = self._stages(rows, g_runs)
        is_labelled = bool(self.labelled[rows[0]])
        records_in, records_out, wall = self._counts_and_wall(rows, g_runs, is_labelled)
        per_rec, per_batch_n, path_rec = self._per_batch(rows)
        digest = next((self.digests[i] for i in rows.tolist() if self.digests[i]), None)
        # from when its runs started (a consumer waits for its publisher before its first batch)
        started = [self.runs[self.run_names[r]].started_ns for r in g_runs if self.runs[self.run_names[r]].started_ns]
        pipelines = sorted({str(p) for p in self.table.column("pipeline").take(rows).unique().to_pylist()})
        named = self.datasets[int(rows[0])] if self.datasets is not None else None
        raw_label = str(self.table.column("label")[int(rows[0])].as_py()) if is_labelled else ""
        failed = next((why for r in g_runs if (why := self.runs[self.run_names[r]].failures.get(raw_label))), None)
        return GroupSummary(
            label=label, dataset=named if named is not None else _dataset(stages), pipelines=pipelines,
            runs=[self.run_names[r] for r in g_runs], stages=stages, records_in=records_in,
            records_out=records_out, rejected=int(self.rejected[rows].sum()), wall_seconds=wall,
            time=time_stats(per_rec, per_batch_n), path_samples=[float(x) for x in path_rec if np.isfinite(x)],
            payload_digest=digest, labelled=is_labelled,
            span=(min([int(self.start_u[rows].min()), *started]), int(self.end_u[rows].max())), failed=failed)

    def _stages(self, rows: Any, g_runs: list[int]) -> list[StageSummary]:
        """One summary per stage (step, stage, operator), in run order, then step order."""
        import numpy as np

        keys: dict[tuple[int, str, str], list[int]] = {}
        order = sorted(rows.tolist(), key=lambda i: (g_runs.index(self.run_codes[i]), self.step[i], i))
        for i in order:
            keys.setdefault((int(self.step[i]), self.stage[i], self.operator[i]), []).append(i)
        out = []
        for (st, kind, op), idx_list in keys.items():
            idx = np.asarray(idx_list)
            ni = self.n_in[idx]
            has_in, has_out = self.has_in[idx], self.has_out[idx]
            per = np.divide(self.dur[idx], ni, out=np.full(len(idx), np.nan), where=ni > 0)
            out.append(StageSummary(
                stage=kind, operator=op, step=st, params=_json(self.params[idx_list[0]]), batches=len(idx),
                records_in=int(ni.sum()), records=int(self.records[idx].sum()),
                rejected=int(self.rejected[idx].sum()), seconds=float(self.dur[idx].sum()) / 1e9,
                bytes_in=int(self.b_in[idx][has_in].sum()) if has_in.any() else None,
                bytes_in_records=int(ni[has_in].sum()),
                bytes_out=int(self.b_out[idx][has_out].sum()) if has_out.any() else None,
                bytes_out_records=int(self.records[idx][has_out].sum()),
                time=time_stats(per, ni),
            ))
        return out

    def _counts_and_wall(self, rows: Any, g_runs: list[int], is_labelled: bool) -> tuple[int, int, float]:
        """(records into its first stage, records out of its last, its time in seconds), over its runs."""
        records_in = records_out = 0
        spans = []
        for r in g_runs:
            rr = rows[self.run_codes[rows] == r]
            # A bench's configuration ran its stages one after another, sharing some rows' times with
            # others (serialize is timed once per format): its time is its own stages' time, not a span.
            if is_labelled:
                spans.append((0, int(self.dur[rr].sum())))
            else:
                spans.append((int(self.start_u[rr].min()), int(self.end_u[rr].max())))
            step = self.step[rr]
            records_in += int(self.n_in[rr][step == step.min()].sum())
            records_out += int(self.records[rr][step == step.max()].sum())
        # the runs of a pool work at the same time: their time is the union of their spans, not the sum
        wall = (sum(hi - lo for lo, hi in spans) if is_labelled else covered(spans)) / 1e9
        return records_in, records_out, wall

    def _per_batch(self, rows: Any) -> tuple[Any, Any, Any]:
        """Per batch: time per record over all stages, records, and time per record on the publish + consume
        path (all stages when it has none of them)."""
        import numpy as np

        key = self.run_codes[rows].astype(np.int64) * (1 << 40) + self.batch[rows]
        _, inverse = np.unique(key, return_inverse=True)
        dur = self.dur[rows]
        per_batch_time = np.bincount(inverse, weights=dur)
        per_batch_n = np.zeros(len(per_batch_time), dtype=np.int64)
        np.maximum.at(per_batch_n, inverse, self.n_in[rows])
        per_rec = np.divide(per_batch_time, per_batch_n, out=np.full(len(per_batch_n), np.nan),
                            where=per_batch_n > 0)
        path_mask = self.on_path[rows]
        if not path_mask.any():
            return per_rec, per_batch_n, per_rec
        path_time = np.bincount(inverse, weights=np.where(path_mask, dur, 0.0), minlength=len(per_batch_n))
        return per_rec, per_batch_n, np.divide(path_time, per_batch_n, out=np.full(len(per_batch_n), np.nan),
                                               where=per_batch_n > 0)


def _add_latency(groups: list[GroupSummary], latency: Any, notes: list[str]) -> None:
    """Exact per-record latency figures of each group: transit (sent -> received) and end to end (sent -> done);
    a row stands for ``records`` records (``metrics.columns``)."""
    import numpy as np
    import pyarrow.compute as pc

    labels = latency.column("label").to_pylist() if "label" in latency.column_names else None
    run_col = np.asarray(latency.column("run_id").to_pylist(), dtype=object)
    sent_valid = pc.is_valid(latency.column("sent_ns")).to_numpy(zero_copy_only=False)
    recv_valid = pc.is_valid(latency.column("received_ns")).to_numpy(zero_copy_only=False)
    weights = _int(latency, "records") if "records" in latency.column_names else np.ones(latency.num_rows, np.int64)
    if missing := int(weights[~sent_valid].sum()):
        notes.append(f"{missing} record(s) without Wirepipe-Sent-At are left out of the latency figures")
    sent, received, done = (_int(latency, k) for k in ("sent_ns", "received_ns", "done_ns"))
    owner = np.asarray(labels, dtype=object) if labels is not None else None
    for g in groups:
        # a bench labels its latency rows; a pipeline's are its runs' (a pool worker's, its own runs')
        mine = ((owner == g.label) if owner is not None else np.isin(run_col, g.runs)) & sent_valid
        if not mine.any():
            continue
        for name, mask, until in (("transit", mine & recv_valid, received), ("end_to_end", mine, done)):
            values = np.repeat(until[mask] - sent[mask], weights[mask])
            stats = time_stats(values)
            if stats is not None:
                g.latency[name] = stats
                g.latency_cdf[name] = cdf_points(values)
    if any(s.min < 0 for g in groups for s in g.latency.values()):
        notes.append("some latencies are negative: the publisher's and the consumer's clocks disagree "
                     "(sync them with NTP/PTP, or read the figures as relative)")


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
    """What the records were, named after the pipeline's source (``source_name``)."""
    source = min(stages, key=lambda s: s.step)
    return source_name(source.params, source.operator)


def source_name(params: dict[str, Any], source_type: str) -> str:
    """The generate source's dataset, else the source's subject, file names (not their folders: a heading, not
    a location) or stream, else its type.

    >>> source_name({"path": ["cap/events/", "cap/orders"]}, "capture"), source_name({"path": "a/b.jsonl"}, "jsonl")
    ('events, orders', 'b.jsonl')
    >>> source_name({"subject": "points.>"}, "nats"), source_name({}, "generate")
    ('points.>', 'generate')
    """
    for key in ("dataset", "subject", "path", "stream"):
        value = params.get(key)
        if not value:
            continue
        if key != "path":
            return str(value)
        paths = value if isinstance(value, list) else [value]
        return ", ".join(str(v).rstrip("/").rsplit("/", 1)[-1] for v in paths)
    return source_type
