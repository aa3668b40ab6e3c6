"""A lean core: every format and codec library beyond the core is an extra, named where it is missing.

The missing library is simulated in a child process by setting its ``sys.modules`` entry to ``None``
(what Python does for a module that cannot be imported), so the real CLI runs as a user's would.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the toml extra's tomli
    import tomli as tomllib

from wirepipe.codecs.compression import CODECS
from wirepipe.codecs.formats import FORMATS

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CORE_MODULES = {"", "json", "pickle", "zlib", "bz2", "lzma", "msgpack", "zstandard", "orjson", "pyarrow", "numpy"}
# the import name of a library -> its distribution on PyPI
DISTRIBUTIONS = {"cbor2": "cbor2", "google.protobuf": "protobuf", "fastavro": "fastavro", "bson": "pymongo",
                 "flatbuffers": "flatbuffers", "tomli_w": "tomli-w", "brotli": "brotli", "lz4": "lz4",
                 "cramjam": "cramjam"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=;\[ ]", r, maxsplit=1)[0].strip().lower() for r in requirements}


def _wirepipe(blocked: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = (f"import sys\nfor m in {blocked!r}: sys.modules[m] = None\n"
            f"from wirepipe.cli import main\nsys.argv = ['wirepipe', *{list(args)!r}]\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_the_core_holds_no_format_or_codec_library_of_an_extra() -> None:
    core = _names(PYPROJECT["project"]["dependencies"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    for entry in [*FORMATS.values(), *CODECS.values()]:
        if entry.library in CORE_MODULES:
            assert entry.extra == "", entry.name
            continue
        dist = DISTRIBUTIONS[entry.library]
        assert dist not in core, f"{entry.name}: {dist} is in the core dependencies"
        assert entry.extra, f"{entry.name}: no extra named for {entry.library}"
        assert dist in _names(extras[entry.extra]), f"{entry.name}: extra {entry.extra} does not install {dist}"
    assert {"grpcio-tools", "apache-beam", "faust-streaming"} & core == set()
    assert "wirepipe[formats,codecs,plots]" in extras["study"]


@pytest.mark.slow
def test_a_config_naming_a_missing_library_is_refused_by_validate_and_run_with_the_extra(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text("name: p\nsource: {type: generate, dataset: point, count: 10}\n"
                      "operators:\n  - serialize: {format: msgpack}\n  - compress: {codec: lz4}\nsink: {type: 'null'}\n")
    for command in ("validate", "run"):
        done = _wirepipe(["lz4"], command, str(config), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (f"error: {config}: operators[1].compress: codec lz4 needs lz4, which is not "
                                       "installed: pip install '.[lz4]' in wirepipe's clone")
    done = _wirepipe([], "validate", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_codecs_shows_the_extra_and_bench_leaves_out_what_is_missing(tmp_path: Path) -> None:
    done = _wirepipe(["cbor2"], "codecs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"cbor .*no: the cbor extra", done.stdout)
    assert re.search(r"msgpack .*yes", done.stdout)
    done = _wirepipe(["lz4"], "bench", "--quick", "--dataset", "point", "--format", "msgpack", "--transport",
                     "none", "--repetitions", "20", "--iterations", "1", "--yes", "--out", str(tmp_path / "b"),
                     cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "left out, not installed: codec lz4 (pip install '.[lz4]' in wirepipe's clone)" in done.stdout
    assert "lz4" not in (tmp_path / "b" / "bench.md").read_text()
    done = _wirepipe(["lz4"], "bench", "--dataset", "point", "--codec", "lz4", "--transport", "none", "--yes",
                     cwd=tmp_path)
    assert done.returncode == 2
    assert "--codec: not installed: lz4 (pip install '.[lz4]' in wirepipe's clone)" in done.stderr
