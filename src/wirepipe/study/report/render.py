"""A report as tables (for the terminal, Markdown and HTML) and as tidy CSV rows.

``tables(report)`` builds every table once, as formatted text cells (``report.table.Table``);
the terminal, Markdown and HTML only draw them, so the three always agree. ``csv_rows``
gives the same figures unformatted (times in µs, sizes in bytes) for spreadsheets.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

from ...core.table import Table, md_cell, num, terminal_width, wrap
from .groups import GroupSummary, StageSummary
from .recommend import format_bandwidth
from .statistics import QUANTILES, TimeStats
from .summary import Report

TIME_COLUMNS = ("mean", "std", "min", *(name for name, _ in QUANTILES), "max")


def _times(stats: TimeStats | None, scale: float) -> list[str]:
    return [num(stats.get(c) if stats else None, scale) for c in TIME_COLUMNS]


def _side(g: GroupSummary, which: str) -> str:
    side = g.publish_side if which == "publish" else g.consume_side
    return f"{num(side.ns_per_record, 1e3)} ({'+'.join(side.stages)})" if side else "-"


def _sum_row(g: GroupSummary) -> list[str]:
    pub, con = g.publish_side, g.consume_side
    return [g.label, g.chain or "-", num(pub.ns_per_record, 1e3) if pub else "-", "+".join(pub.stages) if pub else "",
            num(con.ns_per_record, 1e3) if con else "-", "+".join(con.stages) if con else "",
            num(g.path_ns_per_record, 1e3)]


def _with_workers(groups: list[GroupSummary]) -> list[GroupSummary]:
    """Each group, then a pool's workers beneath it (labelled ``<pool>: w0``)."""
    from dataclasses import replace

    return [x for g in groups for x in (g, *(replace(w, label=f"{g.label}: {w.label}") for w in g.workers))]


def _pipeline_row(g: GroupSummary) -> list[str]:
    return [g.label, g.dataset, g.chain or "-", num(g.records_in), num(g.records_out), num(g.rejected),
            num(g.wall_seconds), num(g.records_per_s), num(g.mb_per_s), num(g.time.mean if g.time else None, 1e3),
            num(g.raw_bytes_per_record), num(g.wire_bytes_per_record), num(g.ratio)]


def tables(report: Report) -> list[Table]:
    """Every table of the report, cells formatted; the recommendation first."""
    out = [recommend_table(report),
        Table("Pipelines", ["pipeline", "dataset", "chain", "records in", "out", "rejected", "wall s", "records/s",
                            "MB/s", "µs/rec", "raw B/rec", "wire B/rec", "ratio"],
              [_pipeline_row(g) for g in _with_workers(report.groups)],
              [False] * 3 + [True] * 10,
              "records/s and MB/s over the wall time of each run (a pool's: the time its workers ran, each worker "
              "beneath it; MB/s of wire bytes; for a bench's configuration, over the time of its own stages); "
              "µs/rec is the sum of all stages; ratio = serialized / wire bytes.",
              [0, 3, 2, 2, 1, 1, 0, 0, 1, 0, 2, 0, 1]),
        Table("Publish side and consume side (µs per record, the sums the study minimises)",
              ["pipeline", "chain", "publish side", "of", "consume side", "of", "total"],
              [_sum_row(g) for g in report.groups], [False, False, True, False, True, False, True],
              "publish side = serialize + compress + publish, consume side = consume + decompress + deserialize: "
              "the mean time per record of each of those stages the pipeline has.", [0, 1, 0, 2, 0, 2, 0]),
        Table("Stages: throughput and sizes",
              ["pipeline", "stage", "operator", "batches", "records", "rejected", "busy s", "records/s",
               "MB/s", "B/rec in", "B/rec out", "ratio"],
              [[g.label, s.stage, s.operator, num(s.batches), num(s.records), num(s.rejected),
                num(s.seconds), num(s.records_per_s), num(s.mb_per_s), num(s.bytes_in_per_record),
                num(s.bytes_out_per_record), num(s.ratio)] for g in report.groups for s in g.stages],
              [False] * 3 + [True] * 9,
              "records/s and MB/s over the stage's own busy time (MB/s counts the larger of its input and "
              "output, the uncompressed side for codecs); ratio = uncompressed / compressed.",
              [0, 0, 1, 3, 2, 2, 1, 0, 1, 2, 2, 1]),
        Table("Stages: time per record (µs)", ["pipeline", "stage", "operator", *TIME_COLUMNS],
              [row for g in report.groups for row in
               [*([g.label, s.stage, s.operator, *_times(s.time, 1e3)] for s in g.stages),
                [g.label, "all stages", "", *_times(g.time, 1e3)]]],
              [False] * 3 + [True] * len(TIME_COLUMNS),
              "from per-batch rows: each batch's time / its records, weighted by records (see the docs, Read metrics and reports).",
              [0, 0, 1, 1, 3, 2, 0, 2, 0, 3, 2]),
    ]
    if report.flows:
        out.insert(1, flows_table(report))
    lat = [[g.label, kind.replace("_", " "), num(s.count), *_times(s, 1e6)]
           for g in report.groups for kind, s in g.latency.items()]
    if lat:
        out.append(Table("End-to-end latency per record (ms)", ["pipeline", "from Sent-At to", "records",
                                                                 *TIME_COLUMNS], lat,
                         [False] * 2 + [True] * (1 + len(TIME_COLUMNS)),
                         "transit: to receipt by the consumer; end to end: to the end of its last stage.",
                         [0, 0, 2, 1, 3, 2, 0, 2, 0, 3, 2]))
    return out


def flows_table(report: Report) -> Table:
    """Each publisher joined to the consumer that read its stream: the path end to end."""
    rows = []
    for f in report.flows:
        lat = f.latency.get("end_to_end")
        rows.append([f.label, f.dataset, f.chain or "-", num(f.records_in), num(f.records_out),
                     num(f.publish_side.ns_per_record if f.publish_side else None, 1e3),
                     num(f.consume_side.ns_per_record if f.consume_side else None, 1e3),
                     num(f.path_ns_per_record, 1e3), num(f.wire_bytes_per_record),
                     f"{num(lat.p50, 1e6)} / {num(lat.p99, 1e6)}" if lat else "-"])
    return Table("Flows: publisher -> consumer, end to end",
                 ["flow", "dataset", "chain", "published", "consumed", "publish side µs/rec",
                  "consume side µs/rec", "total µs/rec", "wire B/rec", "latency p50 / p99 ms"],
                 rows, [False] * 3 + [True] * 7,
                 "a publisher and the consumer that read its stream (the same stream or subject, at overlapping "
                 "times), joined: the publish side is the publisher's, the consume side the consumer's.",
                 [0, 2, 1, 1, 1, 0, 0, 0, 1, 0])


def recommend_table(report: Report) -> Table:
    return Table(f"Recommend (link: {format_bandwidth(report.bandwidth_bps)})",
                 ["dataset", "for", "configuration", "why", "publish side µs/rec", "consume side µs/rec",
                  "wire B/rec"],
                 [[r.dataset, r.what, r.group.config, f"{r.why}; {r.sureness}" if r.sureness else r.why,
                   _side(r.group, "publish"), _side(r.group, "consume"), num(r.group.wire_bytes_per_record)]
                  for r in report.recommendations],
                 [False] * 4 + [True] * 3,
                 "fastest: the lowest median time per record, with every configuration whose interval overlaps it "
                 "(tied within noise); best for the link: the most records/s when the publisher, the link and "
                 "the consumer work at once, so the slowest of the three sets the rate. A configuration that "
                 "writes the same bytes as a faster one is never picked over it.",
                 [0, 0, 0, 0, 2, 2, 1])


def runs_table(report: Report) -> Table:
    """The runs that recorded batches (failed starts are listed apart: ``failed_starts_table``)."""
    failed = {r.run_id for r in report.failed_starts}
    rows = []
    for r in report.runs.values():
        if r.run_id in failed:
            continue
        host = r.host
        rows.append([r.run_id, r.pipeline or "-", _worker(r), r.started_at or "-",
                     f"{host.get('hostname', '?')} ({host.get('cpus', '?')} cpus, Python {host.get('python', '?')})"
                     if host else "-", r.versions.get("wirepipe", "-")])
    return Table("Runs", ["run", "pipeline", "worker", "started (UTC)", "host", "wirepipe"], rows, [False] * 6,
                 priority=[0, 0, 1, 1, 2, 3])


def failed_starts_table(report: Report) -> Table:
    return Table(f"Failed starts: {len(report.failed_starts)} run(s) that stopped before they could read",
                 ["run", "pipeline", "worker", "started (UTC)"],
                 [[r.run_id, r.pipeline or "-", _worker(r), r.started_at or "-"] for r in report.failed_starts],
                 [False] * 4, "a run that stopped before its source and sink were open (it could not connect, "
                 "its input was missing, it was stopped while it waited): the log of that run says why.",
                 [0, 0, 1, 1])


def _worker(r: Any) -> str:
    w = r.worker
    return f"w{w.get('index')} of {w.get('workers')}" if w else "-"


SAMPLES = "Samples measured"


def sample_lines(report: Report) -> list[str]:
    """A bench's datasets, one line each: which records were measured and how they were drawn."""
    return [f"{dataset}: {text}" for dataset, text in report.samples.items()]


def failure_lines(report: Report) -> list[str]:
    """A bench's failed combinations, one line each."""
    return [f"{label}: {why}" for label, why in report.failures.items()]


def snippets(report: Report) -> list[tuple[str, str]]:
    """(title, YAML) of each recommended configuration, once per configuration (none for the only one
    measured: that one is running already)."""
    seen: dict[str, tuple[str, str]] = {}
    for r in report.recommendations:
        if r.kind == "only":
            continue
        key = f"{r.dataset}: {r.group.config}"
        if key not in seen:
            seen[key] = (f"{key} ({r.what})", r.group.snippet())
    return list(seen.values())


# --- terminal ----------------------------------------------------------------------------------


def print_terminal(report: Report, console: Any = None, width: int | None = None) -> None:
    """Plain-text tables that fit the terminal, recommended configurations first, YAML never cut."""
    width = width or terminal_width()
    ts = tables(report)
    parts = ["\n".join(recommend_lines(report, width))]
    if report.samples:
        parts.append("\n".join([SAMPLES, *(x for line in sample_lines(report) for x in wrap(line, width))]) + "\n")
    if report.failures:
        parts.append("\n".join(["Failed combinations", *(x for line in failure_lines(report)
                                                         for x in wrap(line, width))]) + "\n")
    parts += [t.text(width, "--markdown FILE") for t in [runs_table(report), *extra_tables(report), *ts[1:]]]
    parts += [f"note: {note}" for note in report.notes]
    text = "\n".join(parts)
    if console is not None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        sys.stdout.write(text + "\n")


def recommend_lines(report: Report, width: int) -> list[str]:
    """The recommendations as text: per dataset, each pick, its figures and how sure, then its YAML (never cut)."""
    lines = [f"Recommendation (link: {format_bandwidth(report.bandwidth_bps)})"]
    for dataset in dict.fromkeys(r.dataset for r in report.recommendations):
        for r in (r for r in report.recommendations if r.dataset == dataset):
            if r.kind == "only":  # one line: nothing was compared
                lines += ["", *wrap(f"{dataset}: {r.what}: {r.group.config}: {r.why}", width)]
                continue
            lines += ["", *wrap(f"{dataset}: {r.what}: {r.group.config}", width),
                      *wrap(f"{r.why}; {r.sureness}" if r.sureness else r.why, width, "  "),
                      *wrap(f"publish side {_side(r.group, 'publish')} µs/rec, consume side "
                            f"{_side(r.group, 'consume')} µs/rec, {num(r.group.wire_bytes_per_record)} B/rec "
                            "on the wire", width, "  "),
                      *r.group.snippet(width).splitlines()]
    return [*lines, ""]


def extra_tables(report: Report) -> list[Table]:
    """Tables a report has only when there is something to say: the failed starts."""
    return [failed_starts_table(report)] if report.failed_starts else []


# --- Markdown ----------------------------------------------------------------------------------


def to_markdown(report: Report, title: str = "wirepipe report") -> str:
    ts = tables(report)
    parts = [f"# {title}\n", ts[0].markdown()]
    for name, yaml in snippets(report):
        parts.append(f"#### {name}\n\n```yaml\n{yaml}\n```\n")
    if report.samples:
        parts.append(f"### {SAMPLES}\n\n" + "\n".join(f"- {md_cell(line)}" for line in sample_lines(report)) + "\n")
    if report.failures:
        parts.append("### Failed combinations\n\n" + "\n".join(f"- {md_cell(line)}" for line in failure_lines(report))
                     + "\n")
    parts += [t.markdown() for t in [runs_table(report), *extra_tables(report), *ts[1:]]]
    if report.notes:
        parts.append("\n".join(f"- note: {n}" for n in report.notes) + "\n")
    return "\n".join(parts)


# --- CSV -----------------------------------------------------------------------------------------

CSV_COLUMNS = ("pipeline", "dataset", "chain", "row", "step", "stage", "operator", "batches", "records", "rejected",
               "seconds", "records_per_s", "mb_per_s", *(f"{c.replace('.', '')}_us" for c in TIME_COLUMNS),
               "bytes_in_per_record", "bytes_out_per_record", "ratio")


def csv_rows(report: Report) -> list[dict[str, Any]]:
    """One tidy row per stage, per pipeline total, per side (publish, consume) and per latency kind; times in µs."""
    out: list[dict[str, Any]] = []

    def times(stats: TimeStats | None) -> dict[str, Any]:
        return {f"{c.replace('.', '')}_us": (stats.get(c) / 1e3 if stats else None) for c in TIME_COLUMNS}

    for g in report.groups:
        base = {"pipeline": g.label, "dataset": g.dataset, "chain": g.chain}
        for s in g.stages:
            out.append({**base, "row": "stage", "step": s.step, "stage": s.stage, "operator": s.operator,
                        **_stage_figures(s), **times(s.time)})
        out.append({**base, "row": "pipeline", "records": g.records_out, "rejected": g.rejected,
                    "seconds": g.wall_seconds, "records_per_s": g.records_per_s, "mb_per_s": g.mb_per_s,
                    "bytes_in_per_record": g.raw_bytes_per_record, "bytes_out_per_record": g.wire_bytes_per_record,
                    "ratio": g.ratio, **times(g.time)})
        for which, side in (("publish_side", g.publish_side), ("consume_side", g.consume_side)):
            if side is not None:
                out.append({**base, "row": which, "stage": "+".join(side.stages), "mean_us": side.ns_per_record / 1e3})
        for kind, stats in g.latency.items():
            out.append({**base, "row": f"latency_{kind}", "records": stats.count, **times(stats)})
    return out


def _stage_figures(s: StageSummary) -> dict[str, Any]:
    return {"batches": s.batches, "records": s.records, "rejected": s.rejected, "seconds": s.seconds,
            "records_per_s": s.records_per_s, "mb_per_s": s.mb_per_s, "bytes_in_per_record": s.bytes_in_per_record,
            "bytes_out_per_record": s.bytes_out_per_record, "ratio": s.ratio}


def write_csv(report: Report, path: str | Path) -> None:
    """Tidy CSV to ``path`` (``-`` for standard output)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, extrasaction="raise")
    writer.writeheader()
    for row in csv_rows(report):
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    _write_text(path, buf.getvalue())


def write_markdown(report: Report, path: str | Path) -> None:
    _write_text(path, to_markdown(report))


def _write_text(path: str | Path, text: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
        return
    from ...storage.files import write_bytes_atomic

    write_bytes_atomic(path, text.encode("utf-8"))  # a reader never opens half a report
