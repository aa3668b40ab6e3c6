"""What a newcomer reads: tables that fit 80 and 120 columns (COLUMNS and a real tmux terminal), plain when
piped, runs labelled and never merged, and an HTML report that a real browser draws."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli import WIREPIPE, wirepipe
from tests.system_tools import system_tool
from wirepipe.study.report import load_results, summarize

ROOT = Path(__file__).parent.parent
BOX = re.compile(r"[│┃║╭╮╯╰┏┓┗┛━─┼╇┡┩]")
pytestmark = pytest.mark.slow  # a bench over NATS, two runs, a terminal and a browser


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bench over NATS (long chain names, byte-identical json/orjson, latency) and two quickstart runs."""
    root = tmp_path_factory.mktemp("study")
    out = wirepipe("bench", "--dataset", "point", "--format", "json,orjson,msgpack-array",
                   "--codec", "none,zstd", "--level", "fastest,best", "--repetitions", "200", "--iterations", "2",
                   "--out", str(root / "bench"), columns=80, timeout=300)
    assert out.returncode == 0, out.stderr
    (root / "bench-80.txt").write_text(out.stdout)
    for _ in range(2):
        run = wirepipe("run", str(ROOT / "configs" / "quickstart.yaml"), "--count", "1000",
                       env={"RESULTS": str(root)}, columns=100)
        assert run.returncode == 0, run.stderr
    return root


def _names(root: Path) -> list[str]:
    res = load_results([root])
    # a bench configuration by its chain label, a pipeline run by its name (its chain is a column of its own)
    return [g.config if g.labelled else g.label for g in summarize(res.stages, res.latency, res.runs).groups]


def check_fits(text: str, width: int, names: list[str]) -> None:
    lines = text.splitlines()
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, too_long[:3]
    assert not BOX.search(text)  # plain text: no boxes when piped
    for name in names:  # every chain or run name appears whole somewhere (never split over lines)
        assert any(name in line for line in lines), name
    assert not any(line.strip() in {"pip", "eli", "ne", "msg…"} for line in lines)


def test_bench_tables_fit_80_columns_and_the_recommendation_is_first_in_files(results: Path) -> None:
    text = (results / "bench-80.txt").read_text()
    labels = [n for n in _names(results / "bench")]
    check_fits("\n".join(line for line in text.splitlines() if "ETA" not in line), 80, labels)
    assert "(not shown at 80 columns:" in text  # columns chosen by width, and it says which
    md = (results / "bench" / "bench.md").read_text()
    assert md.index("### Recommendation") < md.index("### Formats")
    report_md = (results / "bench" / "report.md").read_text()
    assert report_md.index("### Recommend") < report_md.index("### Pipelines")
    html = (results / "bench" / "report.html").read_text()
    assert html.index("Recommend (link") < html.index("<h2>Plots</h2>") < html.index("<h2>Pipelines</h2>")


@pytest.mark.parametrize("width", [80, 120])
def test_report_of_a_bench_and_two_runs_fits_and_labels_every_run(results: Path, width: int) -> None:
    out = wirepipe("report", str(results), columns=width)
    assert out.returncode == 0, out.stderr
    names = _names(results)
    check_fits(out.stdout, width, names)
    quickstarts = [n for n in names if n.startswith("quickstart #")]
    assert len(quickstarts) == 2 and len(set(quickstarts)) == 2  # two runs, two labelled rows
    assert not any(n.count("zstd") > 1 for n in names)  # never one merged chain like msgpack|zstd:best|zstd:...
    yaml_lines = [line for line in out.stdout.splitlines() if line.lstrip().startswith(("- encode", "- decode",
                                                                                           "chain:"))]
    assert yaml_lines and all(len(line) <= width for line in yaml_lines)  # config never cut at the edge


def test_report_pipelines_table_uses_each_combinations_own_rows(results: Path) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = pq.read_table(results / "bench" / "bench.parquet")
    res = load_results([results / "bench"])
    report = summarize(res.stages, res.latency, res.runs)
    for g in report.groups:
        mine = rows.filter(pc.equal(rows.column("label"), g.label))
        busy = pc.sum(pc.subtract(mine.column("end_ns"), mine.column("start_ns"))).as_py() / 1e9
        assert g.wall_seconds == pytest.approx(busy)  # not a span from a shared first row


@pytest.mark.timeout(180)
def test_report_in_a_real_80_column_terminal(results: Path, tmp_path: Path) -> None:
    tmux = system_tool("tmux")
    session = f"wirepipe-{os.getpid()}"
    done = tmp_path / "done"
    command = f"{shlex.join([*WIREPIPE, 'report', str(results)])} > /dev/tty; echo $? > {done}; sleep 600"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    subprocess.run([tmux, "-L", session, "new-session", "-d", "-s", session, "-x", "80", "-y", "50",
                    "sh", "-c", command], check=True, env=env, timeout=30)
    try:
        subprocess.run([tmux, "-L", session, "set-option", "-t", session, "history-limit", "50000"], timeout=30)
        deadline = time.monotonic() + 150
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0"
        screen = subprocess.run([tmux, "-L", session, "capture-pane", "-p", "-J", "-t", session, "-S", "-"],
                                capture_output=True, text=True, timeout=30, check=True).stdout
    finally:
        subprocess.run([tmux, "-L", session, "kill-server"], timeout=30)
    # -J joins lines the terminal wrapped: a joined line longer than 80 would be a table the terminal broke
    assert "Recommendation (link" in screen
    check_fits(screen, 80, [n for n in _names(results) if "#" not in n])


@pytest.mark.timeout(180)
def test_html_report_is_light_and_a_browser_draws_it(results: Path, tmp_path: Path) -> None:
    from matplotlib.image import imread

    page = results / "bench" / "report.html"
    text = page.read_text()
    assert text.count('id="plotly-gz"') == 1 and "cdn" not in text.split('id="plotly-gz"')[0].lower()
    assert page.stat().st_size < 3_000_000  # plotly once (packed) + figures as data
    chromium = system_tool("chromium")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=150).stdout
    figures = len(re.findall(r'class="plotly-graph-div"', text))
    assert f'data-plotted="{figures}"' in dom and figures >= 4  # the page's script unpacked plotly and drew all
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=150)
    image = imread(shot)
    assert image.shape[0] == 2400 and image.shape[1] == 1200
    rgb = image[..., :3].reshape(-1, 3)
    assert rgb.std() > 0.05  # not blank
    saturated = (rgb.max(axis=1) - rgb.min(axis=1)) > 0.3
    assert saturated.mean() > 0.005  # some colour: the bars and markers were drawn
