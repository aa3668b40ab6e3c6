"""The examples/ folders run end to end, each as its README says, against a real nats-server.

Each example's README is the script: its ```bash blocks run in order (``bash -euo pipefail``) in a copy of the
folder, with ``NATS_URL`` naming a server the test started; a block after ``<!-- example-test: skip (REASON) -->``
is left out (starting a server of one's own, a long-lived process the test drives itself). Then the test checks
what the commands made, with exact counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli import ROOT, cli_env, wirepipe
from wirepipe.connectors.nats.server import EmbeddedServer

EXAMPLES = ROOT / "examples"
NAMES = ["own-logs", "jetstream-archive", "capture-replay", "faust-bridge", "rust-peer", "embedded-service"]
BLOCK = re.compile(r"(?:<!-- example-test: (skip|needs) \(([^)]*)\) -->\n)?```(\w+)\n(.*?)^```", re.S | re.M)


def _blocks(name: str) -> list[tuple[str | None, str, str]]:
    """(marker, its reason or module, code) of each ```bash block of the example's README, in order."""
    text = (EXAMPLES / name / "README.md").read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), m.group(4)) for m in BLOCK.finditer(text) if m.group(3) == "bash"]


def _env(server: EmbeddedServer, **extra: str) -> dict[str, str]:
    """The environment the README's commands run in: the server's URL, this interpreter's `wirepipe` and `python`."""
    env = cli_env({"NATS_URL": server.url, **extra})
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_readme(name: str, tmp_path: Path, server: EmbeddedServer, *, beam: bool = False,
               **extra: str) -> tuple[Path, str]:
    """The example's README commands run in a copy of its folder; (the copy, their output)."""
    work = tmp_path / name
    shutil.copytree(EXAMPLES / name, work, ignore=shutil.ignore_patterns("results", "__pycache__"))
    output = []
    for marker, reason, code in _blocks(name):
        if marker == "skip" or (marker == "needs" and not beam):
            continue
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=_env(server, **extra),
                                capture_output=True, text=True, timeout=150, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, f"{name}: {code}\n{result.stdout}\n{result.stderr}"
        output.append(result.stdout + result.stderr)
    return work, "\n".join(output)


def _parquet_rows(pattern: str, folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return [row for f in sorted(folder.glob(pattern)) for row in pq.read_table(f).to_pylist()]


def _without_nulls(value: Any) -> Any:
    """A record as its producer wrote it: the optional fields a typed format filled with null left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def test_every_example_has_a_readme_with_commands_and_its_test() -> None:
    assert sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir()) == sorted(NAMES)
    for name in NAMES:
        blocks = _blocks(name)
        assert [b for b in blocks if b[0] is None], f"{name}: no command the test runs"
        assert all(reason for marker, reason, _ in blocks if marker), f"{name}: a skip without its reason"
        assert f"test_{name.replace('-', '_')}" in Path(__file__).read_text(encoding="utf-8")


# --- own-logs ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_own_logs(tmp_path: Path, nats_server: EmbeddedServer) -> None:
    work, output = run_readme("own-logs", tmp_path, nats_server)
    records = [json.loads(line) for line in (work / "logs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2000
    assert any("http" not in r for r in records) and any("http" in r for r in records)  # optional fields
    schema = yaml.safe_load((work / "log.schema.yaml").read_text(encoding="utf-8"))
    assert {"trace_id", "user_id", "tags"} <= {k for k, v in schema["fields"].items() if str(v).endswith("?")}
    assert {"http?", "error?"} <= set(schema["fields"])
    assert "smallest on the wire: avro|zstd:fastest" in output  # the pick publisher.yaml takes
    archived = _parquet_rows("*.parquet", work / "results" / "logs")
    assert [_without_nulls(r) for r in archived] == records  # every record, in order, as written
    assert (work / "results" / "logs-dead-letters.jsonl").read_text(encoding="utf-8") == ""
    assert "logs-publish" in output and "logs-archive" in output  # the report has both pipelines
    assert "logs-archive" in (work / "results" / "report.md").read_text(encoding="utf-8")
