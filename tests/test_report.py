"""`wirepipe report`: its numbers against DuckDB and pyarrow, its files, its recommendations."""

from __future__ import annotations

import csv
import io
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from tests.cli import invoke
from wirepipe.connectors.generate import GenerateSource
from wirepipe.connectors.null import NullSink
from wirepipe.core.units import parse_bandwidth
from wirepipe.metrics.columns import STAGE_COLUMNS, arrow_schema
from wirepipe.metrics.run_metadata import latency_path
from wirepipe.operators.compress import Compress
from wirepipe.operators.decompress import Decompress
from wirepipe.operators.deserialize import Deserialize
from wirepipe.operators.serialize import Serialize
from wirepipe.pipelines.config import build_pipeline, validate_config
from wirepipe.pipelines.pipeline import Pipeline
from wirepipe.study.report import load_results, summarize
from wirepipe.study.report.plots import to_html, write_pngs
from wirepipe.study.report.render import csv_rows, to_markdown
from wirepipe.study.report.statistics import QUANTILES, time_stats
from wirepipe.testing import TestingSource


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs in one folder: two codec chains on points, and a consumer with latency rows."""
    root = tmp_path_factory.mktemp("results")
    Pipeline(GenerateSource("point", count=5437, batch_size=500),
             [Serialize("msgpack"), Compress("zstd", "fastest"), Decompress("zstd"), Deserialize("msgpack")],
             NullSink(), name="points-msgpack-zstd", metrics=root / "msgpack.parquet").run()
    Pipeline(GenerateSource("point", count=3000, batch_size=700), [Serialize("json"), Deserialize("json")],
             NullSink(), name="points-json", metrics=root / "json.parquet").run()
    now = time.time_ns()
    sizes = (300, 200, 250)
    # runs of three records with the same times, as `unpack` gives the records of one message: a latency row each
    sent = [now - 9_000_000 + 1000 * (i // 3) for n in sizes for i in range(n)]
    received = [now - 9_000_000 + 1000 * (i // 3) + 37_000 * (i // 3 % 7) for n in sizes for i in range(n)]
    seq = [1000 * b + i // 3 for b, n in enumerate(sizes) for i in range(n)]  # a message's number, repeated
    # the meta a NATS source fills
    stamped = TestingSource.from_batches([[b"\x82\xa1x\x01\xa1y\x02"] * n for n in sizes], subjects="stamped",
                                         meta={"sent_ns": sent, "received_ns": received, "seq": seq})
    Pipeline(stamped, [Decompress("none"), Deserialize("msgpack")], NullSink(), name="consumer",
             metrics=root / "consumer.parquet").run()
    return root


def _report_csv(*args: str) -> list[dict[str, str]]:
    out = invoke("report", *args, "--csv", "-")
    assert out.returncode == 0, out.output
    return list(csv.DictReader(io.StringIO(out.stdout)))


def _f(x: str) -> float | None:
    return float(x) if x != "" else None


def test_report_numbers_equal_duckdb_and_pyarrow(results: Path) -> None:
    import duckdb

    printed = _report_csv(str(results))
    stages = {(r["pipeline"], r["stage"]): r for r in printed if r["row"] == "stage"}
    con = duckdb.connect()
    rows = f"read_parquet('{results}/*[!y].parquet/*.parquet')"  # the stage folders, not *.latency.parquet
    con.execute(f"""create view r as select pipeline, stage, records, rejected, records + rejected as n,
                    end_ns - start_ns as d, bytes_in, bytes_out, start_ns, end_ns from {rows}""")
    figures = con.execute("""
        select pipeline, stage, count(*), sum(records), sum(rejected), sum(d) / 1e9, sum(d) / sum(n),
               min(d / n), max(d / n), sum(bytes_in) / sum(n), sum(bytes_out) / sum(records)
        from r group by all""").fetchall()
    assert len(figures) == len(stages) == 6 + 4 + 4
    for pipeline, stage, batches, records, rejected, busy, mean, lo, hi, b_in, b_out in figures:
        p = stages[(pipeline, stage)]
        assert int(p["batches"]) == batches and int(p["records"]) == records and int(p["rejected"]) == rejected
        assert _f(p["seconds"]) == pytest.approx(busy, rel=1e-12)
        assert _f(p["mean_us"]) == pytest.approx(mean / 1e3, rel=1e-12)
        assert _f(p["min_us"]) == pytest.approx(lo / 1e3, rel=1e-12)
        assert _f(p["max_us"]) == pytest.approx(hi / 1e3, rel=1e-12)
        assert _f(p["bytes_in_per_record"]) == (pytest.approx(b_in) if b_in is not None else None)
        assert _f(p["bytes_out_per_record"]) == (pytest.approx(b_out) if b_out is not None else None)
    # percentiles and std over records, each carrying its batch's time (DuckDB: expand rows, quantile_disc)
    qs = [q for _, q in QUANTILES]
    spread = con.execute(f"""
        select pipeline, stage, quantile_disc(t, {qs}), stddev_pop(t)
        from (select pipeline, stage, d / n as t, unnest(range(n)) from r where n > 0) group by all""").fetchall()
    for pipeline, stage, quantiles, std in spread:
        p = stages[(pipeline, stage)]
        for (name, _), value in zip(QUANTILES, quantiles, strict=True):
            assert _f(p[f"{name.replace('.', '')}_us"]) == pytest.approx(value / 1e3, rel=1e-12)
        assert _f(p["std_us"]) == pytest.approx(std / 1e3, rel=1e-6, abs=1e-9)
    # pipeline level: records out of the sink over the run's wall time
    totals = {r["pipeline"]: r for r in printed if r["row"] == "pipeline"}
    for pipeline, out, wall in con.execute("""
            select pipeline, sum(records) filter (where stage = 'write'), (max(end_ns) - min(start_ns)) / 1e9
            from r group by all""").fetchall():
        assert int(totals[pipeline]["records"]) == out
        assert _f(totals[pipeline]["records_per_s"]) == pytest.approx(out / wall, rel=1e-12)

    # the same sums straight from pyarrow
    table = pq.read_table(results / "msgpack.parquet")
    ser = table.filter(pc.equal(table["stage"], "serialize"))
    assert pc.sum(ser["bytes_out"]).as_py() == 7 * 5437
    p = stages[("points-msgpack-zstd", "serialize")]
    assert _f(p["bytes_out_per_record"]) == 7.0 and _f(p["bytes_in_per_record"]) == 8.0
    dur = pc.subtract(ser["end_ns"], ser["start_ns"])
    assert _f(p["mean_us"]) == pytest.approx(pc.sum(dur).as_py() / 5437 / 1e3, rel=1e-12)
    # the study's sums: publish side = serialize + compress
    side = next(r for r in printed if r["row"] == "publish_side" and r["pipeline"] == "points-msgpack-zstd")
    parts = [stages[("points-msgpack-zstd", s)] for s in ("serialize", "compress")]
    assert side["stage"] == "serialize+compress"
    assert _f(side["mean_us"]) == pytest.approx(sum(_f(x["mean_us"]) for x in parts), rel=1e-12)


def test_latency_figures_equal_duckdb(results: Path) -> None:
    import duckdb

    printed = _report_csv(str(results / "consumer.parquet"))  # the latency folder beside it is found
    row = {r["row"]: r for r in printed}
    lat = latency_path(results / "consumer.parquet")
    qs = [q for _, q in QUANTILES]
    count, quantiles, mean = duckdb.sql(f"""
        select count(*), quantile_disc(received_ns - sent_ns, {qs}), avg(received_ns - sent_ns)
        from read_parquet('{lat}/*.parquet') t, range(t.records)""").fetchall()[0]  # a row stands for `records`
    transit = row["latency_transit"]
    assert int(transit["records"]) == count == 750
    assert duckdb.sql(f"select count(*) from read_parquet('{lat}/*.parquet')").fetchall()[0][0] == 100 + 67 + 84
    assert _f(transit["mean_us"]) == pytest.approx(mean / 1e3, rel=1e-12)
    for (name, _), value in zip(QUANTILES, quantiles, strict=True):
        assert _f(transit[f"{name.replace('.', '')}_us"]) == pytest.approx(value / 1e3, rel=1e-12)
    assert _f(row["latency_end_to_end"]["min_us"]) >= 9_000_000 / 1e3 - 1


def test_time_stats_are_weighted_inverted_cdf() -> None:
    rng = np.random.default_rng(7)
    values = rng.exponential(1000.0, 200)
    weights = rng.integers(0, 50, 200)
    s = time_stats(values, weights)
    expanded = np.repeat(values, weights)
    assert s is not None and s.count == len(expanded)
    assert s.mean == pytest.approx(expanded.mean(), rel=1e-12)
    assert s.std == pytest.approx(expanded.std(), rel=1e-9)
    assert (s.min, s.max) == (expanded.min(), expanded.max())
    for name, q in QUANTILES:
        assert s.get(name) == np.percentile(expanded, q * 100, method="inverted_cdf")
    assert time_stats([], []) is None


@pytest.mark.slow
def test_html_is_self_contained_and_pngs_are_images(results: Path, tmp_path: Path) -> None:
    from matplotlib.image import imread

    html_path, png_dir, md_path = tmp_path / "r.html", tmp_path / "png", tmp_path / "r.md"
    out = invoke("report", str(results), "--quiet", "--html", str(html_path), "--png", str(png_dir),
                 "--markdown", str(md_path))
    assert out.returncode == 0, out.output
    page = html_path.read_text(encoding="utf-8")
    # nothing is loaded from anywhere: no external scripts, styles or images
    assert not re.search(r"<script[^>]+src=|<link\b|<img[^>]+src=[\"']?(https?:)?//|url\(\s*[\"']?https?:", page)
    # outside the inlined plotly library (whose source holds map-tile URLs it never uses here), no URL at all
    body = re.sub(r'<script type="application/gzip;base64" id="plotly-gz">.*?</script>', "", page, flags=re.S)
    assert len(body) < len(page) / 10 and not re.search(r"https?://", body)
    # per dataset (point, stamped): stage times and a scatter; latency bars (stamped) and the CDF
    assert body.count('class="plotly-graph-div"') == 6
    assert "Pareto front" in page and "stamped: latency per record: CDF" in page
    pngs = sorted(p.name for p in png_dir.iterdir())
    assert pngs == ["latency_cdf.png", "size_vs_time-point.png", "size_vs_time-stamped.png", "stage_times.png"]
    for name in pngs:
        data = (png_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        image = imread(png_dir / name)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    md = md_path.read_text(encoding="utf-8")
    assert "### Stages: time per record (µs)" in md and "| points-json | serialize | json |" in md
    assert "```yaml" in md and 'encode: {chain: "msgpack|zstd:fastest"}' in md


def test_report_without_plot_libraries_still_works(results: Path, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    for lib in ("plotly", "matplotlib"):
        monkeypatch.setitem(sys.modules, lib, None)  # `import plotly` now raises ImportError
    res = load_results([results])
    report = summarize(res.stages, res.latency, res.runs)
    page, notes = to_html(report)
    assert "plots skipped" in " ".join(notes) and "plots skipped" in page
    assert "Stages: time per record" in page
    files, why = write_pngs(report, tmp_path / "png")
    assert files == [] and "matplotlib is not installed" in why[0]
    out = invoke("report", str(results), "--quiet", "--html", str(tmp_path / "r.html"))
    assert out.returncode == 0 and "plots skipped" in out.output


# --- recommendations on rows a benchmark labelled itself --------------------------------------------


def _config_rows(label: str, stages: list[tuple[str, str, float, int | None, int | None]]) -> dict[str, list]:
    """One batch of 1000 records per stage: (stage, operator, µs per record, bytes in, bytes out per record)."""
    cols: dict[str, list] = {name: [] for name in [*STAGE_COLUMNS, "label", "dataset"]}
    t = 0
    for step, (stage, op, us, b_in, b_out) in enumerate([("generate", "generate:point", 1.0, None, None), *stages]):
        d = int(us * 1000 * 1000)
        for k, v in {"run_id": f"run-{label}", "pipeline": "bench", "config_digest": None, "batch": 0, "step": step,
                     "stage": stage, "operator": op, "params": "{}", "records": 1000, "rejected": 0,
                     "bytes_in": b_in * 1000 if b_in is not None else None,
                     "bytes_out": b_out * 1000 if b_out is not None else None, "start_ns": t, "end_ns": t + d,
                     "lost": None, "redelivered": None, "reasons": None, "projected": 0, "messages": 1000, "lost_tail": None,
                     "label": label,
                     "dataset": "point"}.items():
            cols[k].append(v)
        t += d
    return cols


def _bench_table() -> pa.Table:
    configs = {
        "fast": [("serialize", "msgpack", 2, 8, 1000), ("publish", "nats", 0.5, 1000, 1000),
                 ("consume", "nats", 0.5, None, 1000), ("deserialize", "msgpack", 2, 1000, None)],
        "small": [("serialize", "msgpack", 2, 8, 1000), ("compress", "zstd:best", 50, 1000, 100),
                  ("decompress", "zstd", 5, 100, 1000), ("deserialize", "msgpack", 2, 1000, None)],
        "mid": [("serialize", "msgpack", 2, 8, 1000), ("compress", "zstd:fastest", 8, 1000, 300),
                ("decompress", "zstd", 3, 300, 1000), ("deserialize", "msgpack", 2, 1000, None)],
    }
    merged: dict[str, list] = {}
    for label, stages in configs.items():
        for k, v in _config_rows(label, stages).items():
            merged.setdefault(k, []).extend(v)
    schema = pa.schema([*arrow_schema(STAGE_COLUMNS), ("label", pa.string()), ("dataset", pa.string())])
    return pa.Table.from_pydict(merged, schema=schema)


def test_recommendations_follow_the_figures() -> None:
    report = summarize(_bench_table(), bandwidth_bps=parse_bandwidth("100Mbit"))
    picks = {r.kind: r.group.label for r in report.recommendations}
    # fastest: publish+consume side fast 5 µs < mid 15 < small 59; smallest: 100 B
    # 100 Mbit/s: link µs/rec fast 80, small 8, mid 24 -> rates 1/max(sides, link): mid wins (24 µs)
    assert picks == {"fastest": "fast", "smallest": "small", "bandwidth": "mid"}
    by = {g.label: g for g in report.groups}
    assert by["fast"].publish_side.ns_per_record == pytest.approx(2500)
    assert by["fast"].publish_side.stages == ("serialize", "publish")
    assert by["fast"].consume_side.stages == ("consume", "deserialize")
    assert by["mid"].wire_bytes_per_record == 300 and by["mid"].ratio == pytest.approx(1000 / 300)
    fast_lan = summarize(_bench_table(), bandwidth_bps=parse_bandwidth("10Gbit"))
    assert {r.kind: r.group.label for r in fast_lan.recommendations}["bandwidth"] == "fast"


def test_a_failed_combination_is_never_a_pick_even_with_rows() -> None:
    """Results of an older bench kept a failed combination's rows (its in-process figures, the fastest here):
    its run's failures name it, so no pick is it; the figures pick among the others."""
    from wirepipe.study.report.results import RunInfo

    runs = {"run-fast": RunInfo("run-fast", failures={"fast": "nats: the records that crossed NATS differ"})}
    report = summarize(_bench_table(), runs=runs, bandwidth_bps=parse_bandwidth("10Gbit"))
    assert {r.kind: r.group.label for r in report.recommendations} == {
        "fastest": "mid", "smallest": "small", "bandwidth": "mid"}
    assert {g.label: g.failed for g in report.groups} == {
        "fast": "nats: the records that crossed NATS differ", "small": None, "mid": None}
    assert report.failures == {"fast": "nats: the records that crossed NATS differ"}


def test_one_run_is_recommended_with_the_figures_of_its_tables(results: Path) -> None:
    """One configuration measured: the recommendation's µs per record is the total its tables show (the
    sides' sum, not a median over batches beside a mean), and its bytes on the wire are the tables' too."""
    from wirepipe.core.table import num
    from wirepipe.study.report.render import recommend_lines, tables

    res = load_results([results / "msgpack.parquet"])
    report = summarize(res.stages, res.latency, res.runs)
    [only] = report.recommendations
    g = only.group
    assert only.kind == "only" and g.path_median != g.path_ns_per_record  # batches vary: the two differ
    sides = next(t for t in tables(report) if t.title.startswith("Publish side and consume side"))
    [row] = sides.rows
    total = num(g.publish_side.ns_per_record / 1e3 + g.consume_side.ns_per_record / 1e3)
    assert row[-1] == num(g.path_ns_per_record, 1e3) == total
    assert only.why.startswith(f"{row[-1]} µs per record (publish + consume side), "
                               f"{num(g.wire_bytes_per_record)} B per record on the wire, ~")
    assert f": {row[-1]} µs per record (publish + consume side)" in " ".join(recommend_lines(report, 200))
    # a figure not known is an ASCII "-": one column and one byte wherever the table is shown
    assert row[:4] == ["points-msgpack-zstd", "msgpack|zstd:fastest", row[2], "serialize+compress"]
    cells = [c for t in tables(report) for r in t.rows for c in r]
    assert "-" in cells and "–" not in "".join(cells)


def test_recommended_snippet_is_a_valid_pipeline() -> None:
    report = summarize(_bench_table())
    mid = next(r.group for r in report.recommendations if r.kind == "bandwidth")
    publisher, consumer = mid.snippet().split("# consumer")
    # each side behind the source it has: records to publish, payloads from NATS to consume
    for part, source in ((publisher, {"type": "generate", "count": 10}), (consumer, {"type": "nats", "subject": "x"})):
        ops = yaml.safe_load(part)["operators"]
        cfg = validate_config({"name": "x", "source": source, "operators": ops})
        build_pipeline(cfg)
    assert 'encode: {chain: "msgpack|zstd:fastest"}' in publisher


def test_csv_rows_and_markdown_from_the_api(results: Path) -> None:
    res = load_results([results])
    report = summarize(res.stages, res.latency, res.runs)
    assert [g.label for g in report.groups] == ["points-msgpack-zstd", "points-json", "consumer"]
    rows = csv_rows(report)
    assert {r["row"] for r in rows} >= {"stage", "pipeline", "publish_side", "consume_side", "latency_transit",
                                        "latency_end_to_end"}
    assert all(not isinstance(v, float) or math.isfinite(v) for r in rows for v in r.values())
    assert "| Pipelines" not in to_markdown(report) and "### Pipelines" in to_markdown(report)


def test_parse_bandwidth() -> None:
    assert parse_bandwidth("100Mbit") == 100e6
    assert parse_bandwidth("1Gbit/s") == 1e9
    assert parse_bandwidth("10Mbps") == 10e6
    assert parse_bandwidth("12.5MB/s") == 100e6
    assert parse_bandwidth("1MiB/s") == 8 * 1024**2
    assert parse_bandwidth(5e6) == 5e6
    for bad in ("fast", "0Mbit", "-1", "10 parsecs"):
        with pytest.raises(ValueError):
            parse_bandwidth(bad)


def test_report_errors_are_clear(tmp_path: Path) -> None:
    out = invoke("report", str(tmp_path / "missing"))
    assert out.returncode == 2 and "no such file or folder" in out.output
    pq.write_table(pa.table({"a": [1]}), tmp_path / "other.parquet")
    out = invoke("report", str(tmp_path))
    assert out.returncode == 1 and "no wirepipe results" in out.output
    out = invoke("report", str(tmp_path), "--bandwidth", "fast")
    assert out.returncode == 2 and "--bandwidth" in out.output
