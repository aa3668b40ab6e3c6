"""The layer order of ``src/wirepipe``, declared once as import-linter contracts in ``pyproject.toml``.

``.ci/run`` runs ``lint-imports``; this test runs the same contracts so a developer sees a broken layer in the
fast lane, and checks that the contracts can fail (a deferred import up the layers, an operator that imports a
connector, a cycle inside a package).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--no-cache"],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"})


def test_the_package_keeps_its_layers_and_has_no_cycles() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_the_contracts_catch_an_import_up_the_layers_and_a_cycle(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    units = tmp_path / "src" / "wirepipe" / "core" / "units.py"
    units.write_text(units.read_text() + "\n\ndef _up() -> None:\n    from ..pipelines import pipeline  # noqa: F401\n")
    decompress = tmp_path / "src" / "wirepipe" / "operators" / "decompress.py"  # an operator that opens connections
    decompress.write_text(decompress.read_text() + "\n\ndef _connect() -> None:\n"
                          "    from ..connectors.nats import connection  # noqa: F401\n")
    compression = tmp_path / "src" / "wirepipe" / "codecs" / "compression.py"
    compression.write_text(compression.read_text() + "\n\ndef _cycle() -> None:\n    from . import chain  # noqa: F401\n")
    done = _lint(tmp_path)
    assert done.returncode == 1
    assert "wirepipe.core.units -> wirepipe.pipelines.pipeline" in done.stdout
    assert "wirepipe.operators.decompress -> wirepipe.connectors.nats.connection" in done.stdout
    assert ".compression -> .chain" in done.stdout
    assert "Contracts: 0 kept, 2 broken." in done.stdout
