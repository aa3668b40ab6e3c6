"""`wirepipe report` on a real deployment's results: a publisher pipeline and a consuming pool of 2 workers
over a real nats-server (and a consumer that failed to start), read as one flow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli import start_wirepipe, wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer, free_port
from wirepipe.study.report.plots import MIN_HEIGHT

N = 3000

PUBLISH = """
name: events-publish
source: {type: jsonl, path: events.jsonl, batch_size: 250}
operators:
  - serialize: {format: msgpack}
  - compress: {codec: zstd}
sink: {type: jetstream, url: "${NATS_URL}", subject: events, stream: {name: EVENTS, subjects: [events]}}
metrics: {path: results/publish.parquet}
"""

CONSUME = """
name: events-consume
source: {type: jetstream, url: "${NATS_URL}", stream: EVENTS, batch_size: 100, connect_timeout: 500ms}
operators:
  - decompress: {codec: auto}
  - deserialize: {format: auto}
  - map: {function: "nats_fixtures:slow_identity"}   # 0.2 ms a record: both workers get batches
sink: {type: parquet, path: "out/part-{part}.parquet"}
metrics: {path: results/consume.parquet}
flush_interval: 200ms
shutdown_timeout: 20s
monitor: {status_interval: 500ms}
"""


@pytest.fixture
def deployment(nats_server: EmbeddedServer, tmp_path: Path) -> Path:
    """The results of: a pool of 2 consumers started first, a publisher of N records, and one consumer that
    could not connect (a failed start)."""
    (tmp_path / "events.jsonl").write_text("".join(
        json.dumps({"ts": 1700000000 + i, "level": "error" if i % 9 == 0 else "info", "msg": f"request {i}"}) + "\n"
        for i in range(N)))
    (tmp_path / "publish.yaml").write_text(PUBLISH)
    (tmp_path / "consume.yaml").write_text(CONSUME)
    # nats_fixtures for the map function, before what the caller's PYTHONPATH has (a worktree's src)
    env = {"NATS_URL": nats_server.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}
    with open(tmp_path / "pool.log", "w") as log:
        pool = start_wirepipe("run", "consume.yaml", "--workers", "2", stdout=subprocess.DEVNULL, stderr=log, env=env,
                              cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while (tmp_path / "pool.log").read_text().count("waiting for stream EVENTS") < 2:
            assert time.monotonic() < deadline and pool.poll() is None, (tmp_path / "pool.log").read_text()
            time.sleep(0.1)
        published = wirepipe("run", "publish.yaml", env=env, cwd=tmp_path)
        assert published.returncode == 0, published.stderr
        while not re.search(rf"events-consume \[2 workers\]: .* {N:,} out", (tmp_path / "pool.log").read_text()):
            assert time.monotonic() < deadline + 60 and pool.poll() is None, (tmp_path / "pool.log").read_text()
            time.sleep(0.2)
        pool.terminate()
        assert pool.wait(60) == 0, (tmp_path / "pool.log").read_text()
    finally:
        if pool.poll() is None:
            pool.kill()
    failed = wirepipe("run", "consume.yaml", cwd=tmp_path, env={**env, "NATS_URL": f"nats://127.0.0.1:{free_port()}"})
    assert failed.returncode == 1 and "cannot connect" in failed.stderr
    return tmp_path


@pytest.mark.slow
def test_report_joins_the_flow_merges_the_pool_and_lists_failed_starts(deployment: Path) -> None:
    out = wirepipe("report", "results", "--markdown", "report.md", "--html", "report.html", cwd=deployment,
                   columns=80)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert max(len(line) for line in text.splitlines()) <= 80, [x for x in text.splitlines() if len(x) > 80]
    # one configuration was measured (msgpack|zstd): one recommendation line, joined end to end, no ranking
    head = text.split("\nRuns\n")[0]
    assert "fastest end to end" not in head and "smallest on the wire" not in head and "# publisher" not in head
    assert re.search(r"^events\.jsonl: one configuration measured: events-publish -> events-consume \[2\s+workers\]"
                     r"\s+\(msgpack\|zstd\): [\d.]+ µs per record", head, re.M), head
    # the flow: what was published and what the pool consumed, end to end
    flow = re.search(r"^events-publish -> events-consume \[2 workers\]\n\s+msgpack\|zstd\s+([\d,]+)\s+([\d,]+)\s",
                     text, re.M)
    assert flow and flow[1] == flow[2] == f"{N:,}", text
    # the pool is one pipeline, each worker beneath it; their records add up
    pool = re.search(r"^events-consume \[2 workers\]\n\s+-\s+([\d,]+)\s", text, re.M)
    workers = re.findall(r"^events-consume \[2 workers\]: w(\d)\n\s+-\s+([\d,]+)\s", text, re.M)
    assert pool and int(pool[1].replace(",", "")) == N, text
    assert sorted(w for w, _ in workers) == ["0", "1"]
    assert sum(int(n.replace(",", "")) for _, n in workers) == N
    # the failed start is listed apart, not as a run or a pipeline
    failed = re.search(r"Failed starts: 1 run\(s\) that stopped before they could read\n.*\n-+\n(\S+)\s+"
                       r"events-consume", text)
    assert failed, text
    runs = text.split("\nRuns\n")[1].split("\n\n")[0]
    assert failed[1] not in runs and runs.count("events-consume") == 2 and "w0 of 2" in runs and "w1 of 2" in runs
    md = (deployment / "report.md").read_text()
    assert "### Flows: publisher -> consumer, end to end" in md and "### Failed starts: 1 run(s)" in md
    page = (deployment / "report.html").read_text()
    figures = json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>', page, re.S)[1])
    stage_plot = figures["plot-stage_times-events.jsonl"]
    assert len(stage_plot["data"][0]["y"]) == 1 and stage_plot["layout"]["height"] >= MIN_HEIGHT  # one bar, not a hairline


@pytest.mark.slow
def test_bench_failures_are_in_report_md_and_html(tmp_path: Path) -> None:
    """A bench where a combination fails: report.md and report.html name it and why, as bench.md and the
    terminal do, and so does `wirepipe report` on the bench's folder."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    at = [dt.datetime(2026, 1, 2, 3, 4, i, tzinfo=dt.timezone.utc) for i in range(20)]  # orjson writes them as text
    pq.write_table(pa.table({"id": list(range(20)), "at": pa.array(at, pa.timestamp("us", tz="UTC"))}),
                   tmp_path / "events.parquet")
    bench = wirepipe("bench", "--input", tmp_path / "events.parquet", "--format", "orjson,pickle", "--codec", "none",
                     "--transport", "none", "--repetitions", "100", "--iterations", "1", "--out", tmp_path / "b",
                     timeout=300, columns=100)
    assert bench.returncode == 4, bench.stderr
    why = "events: orjson: orjson: decoded records differ from the input: record"
    for name in ("report.md", "report.html"):
        assert why in (tmp_path / "b" / name).read_text(), name
    again = wirepipe("report", tmp_path / "b", "--markdown", tmp_path / "r.md", columns=100)
    assert again.returncode == 0, again.stderr
    assert "Failed combinations" in again.stdout and why in again.stdout.replace("\n", " ")
    assert f"### Failed combinations\n\n- {why}" in (tmp_path / "r.md").read_text()


@pytest.mark.slow
def test_the_terminal_report_fits_80_columns_with_a_long_dataset_path(tmp_path: Path) -> None:
    """Two configurations of a pipeline over a file deep in a folder (its path is the dataset): every line of
    the terminal report, the recommendation's headings included, fits 80 columns."""
    folder = tmp_path / "a-folder-with-a-rather-long-name" / "and-another-one-below-it"
    folder.mkdir(parents=True)
    (folder / "application-events.jsonl").write_text("".join(
        json.dumps({"ts": 1700000000 + i, "msg": f"request {i} served"}) + "\n" for i in range(2000)))
    for name, chain in (("events-msgpack-zstd", "msgpack|zstd"), ("events-json-lz4", "json|lz4")):
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\nsource: {{type: jsonl, path: '{folder / 'application-events.jsonl'}', batch_size: 200}}\n"
            f"operators: [{{encode: {{chain: '{chain}'}}}}, {{decode: {{chain: '{chain}'}}}}]\n"
            f"metrics: {{path: results/{name}.parquet}}\n")
        ran = wirepipe("run", f"{name}.yaml", cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
    out = wirepipe("report", "results", cwd=tmp_path, columns=80)
    assert out.returncode == 0, out.stderr
    assert "fastest end to end" in out.stdout  # two configurations: ranked
    assert max(len(line) for line in out.stdout.splitlines()) <= 80, \
        [x for x in out.stdout.splitlines() if len(x) > 80]
