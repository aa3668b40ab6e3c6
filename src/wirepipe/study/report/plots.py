"""The report's plots and the self-contained HTML page.

Plots, per dataset (small multiples: a full study has 64 configurations, one chart of 64
lines reads as noise): time per record stacked by stage, one horizontal bar per
configuration; wire size vs time per record with the Pareto front named; latency p50 and
p99 per configuration as bars; and the full latency CDF only for the recommended few.

The HTML page opens offline and loads nothing. plotly's JavaScript is inlined once,
gzip-compressed and base64-encoded (4.8 MB becomes 2 MB), unpacked in the browser with
``DecompressionStream`` (every current browser has it); the figures are JSON, drawn after
it. Latency CDFs are kept to ``CDF_POINTS`` points. Without plotly the page embeds
matplotlib PNGs as data URIs; without either it still has every table and says why the
plots are missing. PNGs (``--png DIR``) are drawn with matplotlib's Agg canvas, without
pyplot, so no global backend is touched.
"""

from __future__ import annotations

import base64
import functools
import html
import importlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.stages import Stage
from ...storage.files import write_bytes_atomic
from .render import SAMPLES, extra_tables, failure_lines, runs_table, sample_lines, snippets, tables
from .summary import Report

CDF_POINTS = 100  # per latency CDF in the page: a smooth curve, a few kB
CDF_CHOSEN = 6  # at most this many configurations get a full CDF (the recommended ones)


@dataclass
class Bars:
    labels: list[str]
    stages: list[str]
    values: dict[str, list[float]]  # stage -> µs per record of each label


@dataclass
class Scatter:
    dataset: str
    names: list[str]
    x_us: list[float]
    y_bytes: list[float]
    pareto: list[int]  # indices on the front, by increasing time


@dataclass
class Cdf:
    name: str
    x_ms: list[float]
    y: list[float]
    dataset: str = ""


def available() -> dict[str, bool]:
    """Which plotting libraries import (a missing one means fewer plots, never a failed report)."""
    found = {}
    for lib in ("plotly", "matplotlib"):
        try:
            importlib.import_module(lib)
            found[lib] = True
        except ImportError:
            found[lib] = False
    return found


# --- the data behind each plot -------------------------------------------------------------------


def stage_bars(report: Report, dataset: str | None = None) -> Bars:
    """Mean µs per record of each stage kind, per pipeline (of one dataset); sources that make data are left out."""
    groups = [g for g in report.groups if dataset is None or g.dataset == dataset]
    stages: list[str] = []
    for g in groups:
        for s in g.stages:
            if s.stage not in Stage.MAKING_DATA and s.stage not in stages:
                stages.append(s.stage)
    values = {k: [sum(s.time.mean / 1e3 for s in g.stages if s.stage == k and s.time) for g in groups]
              for k in stages}
    return Bars([g.config if dataset is not None else g.label for g in groups], stages, values)


def pareto_front(x: list[float], y: list[float]) -> list[int]:
    """Indices of the points no other point beats on both time and size, by increasing x."""
    order = sorted(range(len(x)), key=lambda i: (x[i], y[i]))
    front: list[int] = []
    best = float("inf")
    for i in order:
        if y[i] < best:
            front.append(i)
            best = y[i]
    return front


def size_vs_time(report: Report) -> list[Scatter]:
    out = []
    for dataset in report.datasets:
        gs = [g for g in report.groups if g.dataset == dataset and g.path_ns_per_record is not None
              and g.wire_bytes_per_record is not None]
        if not gs:
            continue
        x = [g.path_ns_per_record / 1e3 for g in gs]  # type: ignore[operator]
        y = [float(g.wire_bytes_per_record) for g in gs]  # type: ignore[arg-type]
        out.append(Scatter(dataset, [g.config for g in gs], x, y, pareto_front(x, y)))
    return out


def _thin(xs: list[float], ys: list[float], points: int = CDF_POINTS) -> tuple[list[float], list[float]]:
    """At most ``points`` of a CDF's points, evenly spaced in rank, both ends kept."""
    if len(xs) <= points:
        return xs, ys
    step = (len(xs) - 1) / (points - 1)
    idx = sorted({round(i * step) for i in range(points)})
    return [xs[i] for i in idx], [ys[i] for i in idx]


def chosen_groups(report: Report) -> list[Any]:
    """The groups worth a full latency CDF: the recommended ones (all of them when there are few)."""
    with_latency = [g for g in report.groups if g.latency_cdf]
    if len(with_latency) <= CDF_CHOSEN:
        return with_latency
    picked: list[Any] = []
    for r in report.recommendations:
        if r.group.latency_cdf and all(r.group is not g for g in picked):
            picked.append(r.group)
    return picked[:CDF_CHOSEN]


def latency_cdfs(report: Report) -> list[Cdf]:
    """The chosen pipelines' latency CDFs (transit and end to end), in ms, thinned to ``CDF_POINTS``."""
    out = []
    for g in chosen_groups(report):
        for kind, (xs, ys) in g.latency_cdf.items():
            x, y = _thin(xs, ys)
            out.append(Cdf(f"{g.label} ({kind.replace('_', ' ')})", [v / 1e6 for v in x], y, g.dataset))
    return out


@dataclass
class LatencyBars:
    dataset: str
    names: list[str]
    p50_ms: list[float]
    p99_ms: list[float]


def latency_bars(report: Report) -> list[LatencyBars]:
    """End-to-end latency p50 and p99 of every configuration, per dataset, fastest p50 first."""
    out = []
    for dataset in report.datasets:
        gs = [g for g in report.groups if g.dataset == dataset and "end_to_end" in g.latency]
        gs.sort(key=lambda g: g.latency["end_to_end"].p50)
        if gs:
            out.append(LatencyBars(dataset, [g.config for g in gs], [g.latency["end_to_end"].p50 / 1e6 for g in gs],
                                   [g.latency["end_to_end"].p99 / 1e6 for g in gs]))
    return out


# --- plotly (HTML) -------------------------------------------------------------------------------


MIN_HEIGHT = 320  # px: a chart of one or two bars keeps room for its title, legend and axis, not a hairline


def _height(n: int) -> int:
    return max(MIN_HEIGHT, 140 + 22 * n)


def _plotly_figures(report: Report) -> list[tuple[str, Any]]:
    import plotly.graph_objects as go

    figs: list[tuple[str, Any]] = []
    for dataset in report.datasets:
        bars = stage_bars(report, dataset)
        if not bars.stages:
            continue
        fig = go.Figure([go.Bar(name=k, y=bars.labels, x=v, orientation="h",
                                hovertemplate="%{y}<br>" + k + ": %{x:.3g} µs<extra></extra>")
                         for k, v in bars.values.items()])
        fig.update_layout(barmode="stack", title=f"{dataset}: time per record by stage (µs, mean)",
                          xaxis_title="µs per record", legend_title="stage", height=_height(len(bars.labels)),
                          yaxis={"autorange": "reversed", "automargin": True})
        figs.append((f"stage_times-{dataset}", fig))
    for sc in size_vs_time(report):
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=sc.x_us, y=sc.y_bytes, mode="markers", text=sc.names, name="configurations",
                                 hovertemplate="%{text}<br>%{x:.3g} µs/record<br>%{y:.4g} B/record<extra></extra>"))
        fig.add_trace(go.Scatter(x=[sc.x_us[i] for i in sc.pareto], y=[sc.y_bytes[i] for i in sc.pareto],
                                 mode="lines+markers+text", name="Pareto front", line={"shape": "hv", "dash": "dot"},
                                 text=[sc.names[i] for i in sc.pareto], textposition="top right",
                                 marker={"size": 12, "symbol": "circle-open"}, hoverinfo="skip"))
        fig.update_layout(title=f"{sc.dataset}: wire size vs time per record (publish + consume side)",
                          xaxis_title="µs per record", yaxis_title="bytes per record on the wire")
        figs.append((f"size_vs_time-{sc.dataset}", fig))
    for lb in latency_bars(report):
        fig = go.Figure([go.Bar(name="p50", y=lb.names, x=lb.p50_ms, orientation="h"),
                         go.Bar(name="p99", y=lb.names, x=lb.p99_ms, orientation="h")])
        fig.update_layout(barmode="group", title=f"{lb.dataset}: end-to-end latency per record (ms), p50 and p99",
                          xaxis_title="ms from Wirepipe-Sent-At", height=_height(len(lb.names) + 3),
                          yaxis={"autorange": "reversed", "automargin": True})
        figs.append((f"latency-{lb.dataset}", fig))
    all_cdfs = latency_cdfs(report)
    which = " of the recommended configurations" if len(chosen_groups(report)) < _with_latency(report) else ""
    for dataset in dict.fromkeys(c.dataset for c in all_cdfs):  # one per dataset: their scales differ
        cdfs = [c for c in all_cdfs if c.dataset == dataset]
        fig = go.Figure([go.Scatter(x=c.x_ms, y=c.y, mode="lines", name=c.name) for c in cdfs])
        fig.update_layout(title=f"{dataset}: latency per record: CDF{which}",
                          xaxis_title="ms from Wirepipe-Sent-At", yaxis_title="fraction of records",
                          xaxis_type="log" if _wide(cdfs) else "linear")
        figs.append((f"latency_cdf-{dataset}", fig))
    return figs


def _with_latency(report: Report) -> int:
    return sum(1 for g in report.groups if g.latency_cdf)


def _wide(cdfs: list[Cdf]) -> bool:
    xs = [x for c in cdfs for x in c.x_ms if x > 0]
    return bool(xs) and max(xs) / min(xs) > 100


# --- matplotlib (PNG) ----------------------------------------------------------------------------


def _matplotlib_figures(report: Report) -> list[tuple[str, Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figs: list[tuple[str, Any]] = []
    bars = stage_bars(report)
    if bars.stages:
        fig = Figure(figsize=(max(6.0, 1.2 * len(bars.labels) + 3), 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        bottom = [0.0] * len(bars.labels)
        for k, v in bars.values.items():
            ax.bar(bars.labels, v, bottom=bottom, label=k)
            bottom = [b + x for b, x in zip(bottom, v, strict=True)]
        ax.set_title("Time per record by stage (µs, mean)")
        ax.set_ylabel("µs per record")
        ax.tick_params(axis="x", labelrotation=30)
        ax.legend(title="stage", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        figs.append(("stage_times", fig))
    for sc in size_vs_time(report):
        fig = Figure(figsize=(7, 5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.scatter(sc.x_us, sc.y_bytes, label="configurations")
        for name, x, y in zip(sc.names, sc.x_us, sc.y_bytes, strict=True):
            ax.annotate(name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
        ax.step([sc.x_us[i] for i in sc.pareto], [sc.y_bytes[i] for i in sc.pareto], where="post", linestyle=":",
                marker="o", markerfacecolor="none", markersize=12, label="Pareto front")
        ax.set_title(f"{sc.dataset}: wire size vs time per record")
        ax.set_xlabel("µs per record (publish + consume side)")
        ax.set_ylabel("bytes per record on the wire")
        ax.legend(fontsize="small")
        figs.append((f"size_vs_time-{sc.dataset}", fig))
    cdfs = latency_cdfs(report)
    if cdfs:
        fig = Figure(figsize=(7, 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for c in cdfs:
            ax.plot(c.x_ms, c.y, label=c.name)
        if _wide(cdfs):
            ax.set_xscale("log")
        ax.set_title("Latency per record: CDF")
        ax.set_xlabel("ms from Wirepipe-Sent-At")
        ax.set_ylabel("fraction of records")
        ax.legend(fontsize="small")
        figs.append(("latency_cdf", fig))
    return figs


def _png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def write_pngs(report: Report, folder: str | Path) -> tuple[list[Path], list[str]]:
    """Each plot as ``folder/<plot>.png``; returns the files and notes (why a plot is missing)."""
    if not available()["matplotlib"]:
        return [], ["PNG plots skipped: matplotlib is not installed ({install_hint('plots')})"]
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, fig in _matplotlib_figures(report):
        path = out / f"{_safe_name(name)}.png"
        write_bytes_atomic(path, _png_bytes(fig))
        files.append(path)
    return files, _plot_gaps(report)


def _plot_gaps(report: Report) -> list[str]:
    if not latency_cdfs(report):
        return ["no latency CDF: no latency rows (consumers record them from the Wirepipe-Sent-At header)"]
    return []


# --- the HTML page -------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:13px;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ccc;padding:3px 8px}th{background:#f3f3f3;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.caption,.note{color:#555;font-size:12px}pre{background:#f6f6f6;padding:.7em;border-radius:4px}
"""


# Unpacks plotly (gzip, base64) with the browser's DecompressionStream, then draws every figure.
_LOADER = """
(async () => {
  const say = (text) => document.querySelectorAll('.plot').forEach((d) => { d.textContent = text; });
  if (typeof DecompressionStream === 'undefined') { say('This browser cannot unpack the plots.'); return; }
  const packed = document.getElementById('plotly-gz').textContent.trim();
  const bytes = Uint8Array.from(atob(packed), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
  const script = document.createElement('script');
  script.textContent = await new Response(stream).text();
  document.head.appendChild(script);
  const figures = JSON.parse(document.getElementById('figures').textContent);
  for (const [id, fig] of Object.entries(figures)) {
    Plotly.newPlot(id, fig.data, fig.layout, {displaylogo: false, responsive: true});
  }
  document.body.dataset.plotted = String(Object.keys(figures).length);
})();
"""


@functools.lru_cache(maxsize=1)
def _packed_plotly() -> str:
    """plotly.js gzipped (level 6: 1% larger than 9, several times faster) and base64-encoded, once per process."""
    import gzip

    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), 6, mtime=0)).decode()


def to_html(report: Report, title: str = "wirepipe report") -> tuple[str, list[str]]:
    """The report as one self-contained HTML page, the recommendation first; returns (page, notes)."""
    notes: list[str] = []
    libs = available()
    scripts = ""
    plots: list[str] = []
    if libs["plotly"]:
        import json

        figures = {}
        for name, fig in _plotly_figures(report):
            div = f"plot-{_safe_name(name)}"
            figures[div] = json.loads(fig.to_json())
            plots.append(f'<div class="plotly-graph-div" id="{html.escape(div)}"></div>')
        data = json.dumps(figures, separators=(",", ":")).replace("</", "<\\/")
        scripts = (f'<script type="application/json" id="figures">{data}</script>'
                   f'<script type="application/gzip;base64" id="plotly-gz">{_packed_plotly()}</script>'
                   f"<script>{_LOADER}</script>")
    elif libs["matplotlib"]:
        notes.append("plotly is not installed: the HTML shows static matplotlib images")
        for name, fig in _matplotlib_figures(report):
            data = base64.b64encode(_png_bytes(fig)).decode()
            plots.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{data}">')
    else:
        notes.append("plots skipped: neither plotly nor matplotlib is installed ({install_hint('plots')})")
    if plots:
        notes += _plot_gaps(report)
    esc = html.escape
    tabs = tables(report)
    body = [f"<h1>{esc(title)}</h1>", tabs[0].html()]
    body += [f"<h3>{esc(name)}</h3><pre>{esc(yaml)}</pre>" for name, yaml in snippets(report)]
    if report.samples:
        body.append(f"<h2>{SAMPLES}</h2><ul>" + "".join(f"<li>{esc(line)}</li>" for line in sample_lines(report))
                    + "</ul>")
    body.append("<h2>Plots</h2>")
    body += [f"<div class=\"plot\">{p}</div>" for p in plots]
    if report.failures:
        body.append("<h2>Failed combinations</h2><ul>" + "".join(f"<li>{esc(line)}</li>"
                                                                  for line in failure_lines(report)) + "</ul>")
    body += [t.html() for t in [runs_table(report), *extra_tables(report), *tabs[1:]]]
    body += [f'<p class="note">note: {esc(n)}</p>' for n in [*report.notes, *notes]]
    page = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{esc(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}{scripts}</body></html>")
    return page, notes


def write_html(report: Report, path: str | Path) -> list[str]:
    page, notes = to_html(report)
    data = page.encode("utf-8")
    write_bytes_atomic(path, data)  # a browser never loads half a page
    return notes
