"""Types and docs of the package: the PEP 561 marker ships, and the test command runs the docstring
examples of src/wirepipe without importing the optional heavy libraries (see conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
HEAVY = ("apache_beam", "faust", "plotly", "matplotlib", "duckdb")

PROBE = '''
import sys

def pytest_collection_finish(session):
    heavy = [m for m in {heavy!r} if m in sys.modules]
    print("HEAVY=" + ",".join(heavy))
'''


def test_the_package_ships_its_py_typed_marker() -> None:
    assert files("wirepipe").joinpath("py.typed").is_file()


@pytest.mark.slow
def test_the_test_command_collects_the_package_doctests_without_heavy_imports(tmp_path: Path) -> None:
    (tmp_path / "heavy_probe.py").write_text(PROBE.format(heavy=HEAVY))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # the options come from pyproject (testpaths, --doctest-modules), as for `python -m pytest -q`
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "heavy_probe",
                          "src/wirepipe"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    collected = [line for line in out.stdout.splitlines() if line.startswith("src/wirepipe/")]
    assert "src/wirepipe/codecs/__init__.py::wirepipe.codecs" in collected  # the codecs tutorial
    assert "src/wirepipe/core/units.py::wirepipe.core.units.parse_size" in collected
    # left out on purpose (conftest.collect_ignore): they import Beam and Faust at import time
    assert not [c for c in collected if "beam_fn" in c or "integrations/faust" in c]
    assert "HEAVY=\n" in out.stdout, out.stdout
