"""One module per operator, found by the registry scan in the same order; header names from ``wire.Header``."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import wirepipe.operators as operators_package
from wirepipe.operators import OPERATORS
from wirepipe.wire import HEADER_NAMES

SRC = Path(__file__).resolve().parent.parent / "src" / "wirepipe"
BENCHMARKS = SRC.parent.parent / "benchmarks"

# The order of the "allowed operators" lists before the split: a config error lists them so.
ALLOWED_ORDER = ["serialize", "deserialize", "compress", "decompress", "encode", "decode", "map", "filter",
                 "select", "pack", "unpack", "subject"]


def _declaring_modules() -> dict[str, list[str]]:
    out = {}
    for info in pkgutil.iter_modules(operators_package.__path__):
        module = importlib.import_module(f"wirepipe.operators.{info.name}")
        if "OPERATORS" in vars(module):
            out[info.name] = list(module.OPERATORS)
    return out


def test_every_operator_module_registers_one_operator() -> None:
    declaring = _declaring_modules()
    assert all(len(names) == 1 for names in declaring.values()), declaring
    assert sorted(n for names in declaring.values() for n in names) == sorted(ALLOWED_ORDER)
    # named for its operator (``subject`` sets the route of a record: route.py)
    assert {m: names[0] for m, names in declaring.items() if m != names[0]} == {"route": "subject"}


def test_the_registry_finds_them_in_the_same_order() -> None:
    assert list(OPERATORS)[:len(ALLOWED_ORDER)] == ALLOWED_ORDER


def test_an_unknown_operator_lists_the_allowed_ones_in_that_order(tmp_path: Path) -> None:
    from wirepipe.core.errors import ConfigError
    from wirepipe.pipelines.config import load_pipeline

    cfg = tmp_path / "p.yaml"
    cfg.write_text("source: {type: generate, dataset: point, count: 1}\noperators:\n  - squash: {}\n"
                   "sink: {type: null}\n")
    with pytest.raises(ConfigError) as err:
        load_pipeline(cfg)
    message = str(err.value)
    assert "squash" in message
    positions = [message.index(name) for name in ("deserialize", "decompress", "encode", "unpack", "subject")]
    assert positions == sorted(positions), message


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _literal_header_names(path: Path, root: Path = SRC) -> list[str]:
    names = HEADER_NAMES
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [f"{path.relative_to(root)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docs]


def test_header_names_are_spelled_only_in_wire() -> None:
    """The package and the benchmarks (whose hand-written loops publish the same headers) use ``Header``."""
    found = [hit for path in sorted(SRC.rglob("*.py")) if path.relative_to(SRC).as_posix() != "wire/headers.py"
             for hit in _literal_header_names(path)]
    found += [hit for path in sorted(BENCHMARKS.glob("*.py")) for hit in _literal_header_names(path, BENCHMARKS.parent)]
    # The Prometheus endpoint's HTTP response sets an HTTP Content-Type: not the NATS wire contract.
    assert [hit for hit in found if not hit.startswith("pipelines/prometheus.py")] == []


def test_the_header_check_sees_a_literal(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text('"""Sets Content-Type."""\nh = {"Content-Type": "application/json"}\n')
    assert _literal_header_names(tmp_path / "x.py", tmp_path) == ["x.py:2: 'Content-Type'"]
