"""The command line: help without heavy imports, codecs and datasets listings, running configs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.cli import invoke, wirepipe
from wirepipe.codecs import CODECS, FORMATS
from wirepipe.datasets import DATASETS

ROOT = Path(__file__).parent.parent
CONFIGS = sorted(p for p in (ROOT / "configs").glob("*.yaml") if not p.name.endswith(".test.yaml"))  # pipelines


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys\nfrom wirepipe.cli import app\n"
            "from typer.testing import CliRunner\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "heavy = [m for m in ('pyarrow', 'pydantic', 'nats', 'apache_beam', 'faust', 'plotly', 'matplotlib',"
            " 'numpy', 'zstandard') if m in sys.modules]\nprint(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_codecs_lists_every_format_and_codec_with_levels() -> None:
    result = invoke("codecs", columns=200)
    assert result.returncode == 0
    for name in [*FORMATS, *CODECS]:
        assert name in result.stdout
    assert "-131072..22" in result.stdout  # zstd's range


def test_datasets_lists_every_dataset_and_raw_sizes() -> None:
    result = invoke("datasets", columns=200)
    assert result.returncode == 0
    for name in DATASETS:
        assert name in result.stdout
    assert "388008" in result.stdout


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
@pytest.mark.slow
def test_every_config_validates_and_runs(config: Path, tmp_path: Path, nats_env: dict[str, str]) -> None:
    env = {"RESULTS": str(tmp_path), **nats_env}
    assert invoke("validate", config, env=env, columns=200).returncode == 0
    result = wirepipe("run", config, "--count", "300", env=env, columns=200, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for metrics in tmp_path.glob("*.parquet"):  # results are folders of Parquet parts
        assert pq.read_table(metrics).num_rows > 0


def test_quickstart_writes_valid_metrics(tmp_path: Path) -> None:
    result = wirepipe("run", ROOT / "configs" / "quickstart.yaml", "--count", "1200",
                      env={"RESULTS": str(tmp_path)}, columns=200, timeout=300)
    assert result.returncode == 0, result.stderr
    table = pq.read_table(tmp_path / "quickstart.parquet")
    stages = table.column("stage").to_pylist()
    assert stages[:6] == ["generate", "serialize", "compress", "decompress", "deserialize", "write"]
    assert sum(r for r, s in zip(table.column("records").to_pylist(), stages, strict=False) if s == "deserialize") == 1200


def test_help_and_codecs_fit_80_columns_and_cut_nothing() -> None:
    """At 80 columns no option name, content type or encoding is cut (no ellipsis) and no line is longer."""
    for args in (["codecs"], *([command, "--help"] for command in ("run", "bench", "plan", "capture", "replay",
                                                                    "report", "server", "schema"))):
        out = invoke(*args, columns=80)
        assert out.returncode == 0, (args, out.stderr)
        assert "…" not in out.stdout, (args, out.stdout)
        assert max(map(len, out.stdout.splitlines())) <= 80, (args, out.stdout)
    help_text = invoke("bench", "--help", columns=80).stdout
    assert "--records-per-message" in help_text
    commands = invoke("--help", columns=80).stdout.split("Commands:")[1]
    assert "..." not in commands and max(map(len, commands.splitlines())) <= 80, commands
    listing = invoke("codecs", columns=80).stdout
    for f in FORMATS.values():
        assert re.search(rf"^{re.escape(f.name)} +{re.escape(f.content_type)} ", listing, re.M), f.name
    for c in CODECS.values():
        assert re.search(rf"^{re.escape(c.name)} +{re.escape(c.content_encoding)} ", listing, re.M), c.name
