"""A core NATS worker stopped past its ``shutdown_timeout`` with a backlog: every record it took is accounted.

Real nats-server, a real worker process (core NATS -> a 300 us/record ``map`` -> JSONL) and a
real publisher process (30,000 stamped records). SIGTERM arrives while the worker is far behind;
its drain cannot finish within ``shutdown_timeout``, so the run is cut. What was read is then
either in the output file, or counted in the loss figures of the run summary (discarded: read and
never written; missing or dropped: never read), and the worker exits 5 (records lost). Read back: the
file's lines, the figures of the summary and the metrics' ``lost`` column, which adds up to them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.overload import ROOT
from tests.cli import cli_env, start_wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer

pytestmark = pytest.mark.timeout(240)


def test_sigterm_during_a_backlog_past_shutdown_timeout_loses_nothing_uncounted(nats_server: EmbeddedServer,
                                                                                 tmp_path: Path,
                                                                                 make_pipeline: Callable[..., Path]) -> None:
    # The cut run leaves records in the loop's queue and in the operators: they must be counted, not dropped.
    out_file = tmp_path / "out.jsonl"
    cfg = {
        "name": "backlog",
        "source": {"type": "nats", "url": nats_server.url, "subject": "backlog"},
        "operators": [{"map": {"function": "tests.chaos.busy:spin"}}],
        "sink": {"type": "jsonl", "path": str(out_file)},
        "metrics": {"path": str(tmp_path / "metrics.parquet")},
        "shutdown_timeout": "2s",
    }
    path = make_pipeline(cfg)
    spin = {"WIREPIPE_TEST_SPIN_US": "300", "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    worker = start_wirepipe("run", path, "--status", env=spin, cwd=ROOT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stderr or []), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any(ln.startswith("backlog:") for ln in lines):  # the first status line: subscribed
            assert worker.poll() is None and time.monotonic() < deadline, "".join(lines[-20:])
            time.sleep(0.1)
        pub = subprocess.run([sys.executable, "-m", "tests.chaos.overload", "publish", nats_server.url, "backlog",
                              "30000"], capture_output=True, text=True, env=cli_env(spin), cwd=ROOT, timeout=120)
        assert pub.returncode == 0, pub.stderr[-2000:]
        time.sleep(1.0)
        assert worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    reader.join(5)
    err = "".join(lines)
    # The cut run ends as every run does: its summary (the losses by kind, what the cut left), then its verdict.
    assert worker.returncode == 5, err[-3000:]  # records lost: the discarded ones
    summary = next(ln for ln in reversed(lines) if ln.startswith("backlog: ") and "records out of" in ln)
    assert "\n  drain cut: backlog: the drain took longer than shutdown_timeout (2s): records read and not written " \
           "are counted as discarded (lost)\n" in err, err[-3000:]
    assert re.search(r"^error: [\d,]+ of 30,000 records lost \([\d.]+%\), more than --max-lost 0$", lines[-1].rstrip()), \
        lines[-1]
    figures = [re.search(rf"(\d+) {what}", summary) for what in (
        "records out of", "lost", "missing from publisher sequences", "dropped by the client", "discarded at stop")]
    assert all(figures), summary
    out, lost, missing, dropped, discarded = (int(f.group(1)) for f in figures if f)
    written = len(out_file.read_text(encoding="utf-8").splitlines())
    print(f"written {written}, {summary.strip()}")
    assert (missing, dropped) == (0, 0)  # the worker kept up with reading: everything lost was read, then cut
    assert written == out and written + discarded == 30_000, f"written {written} + discarded {discarded}"
    assert lost == discarded and 0 < written < 30_000
    import pyarrow.dataset as ds

    rows = ds.dataset(tmp_path / "metrics.parquet").to_table().to_pylist()
    assert sum(r["lost"] or 0 for r in rows) == lost, "the metrics' lost column adds up to the summary's"
    assert sum(r["records"] for r in rows if r["step"] == 2) == written
