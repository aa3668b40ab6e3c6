"""The import structure of ``src/wirepipe``: no cycles, and every import points down the layer order.

Every import is counted, deferred ones inside functions too (``TYPE_CHECKING`` ones are not):
a deferred import still ties the two modules together. The layer order is the one the
README's "Layout" section states; a new top-level module gets a place in both.
"""

from __future__ import annotations

from pathlib import Path

from tests.tools.import_cycles import cycles, file_graph, report, unit, unit_graph

SRC = Path(__file__).resolve().parent.parent / "src"

# Lowest first. A unit may import units of its own layer (no cycles) and of the layers below.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "exit_codes", "units", "redact", "models", "fields", "batch", "schema", "registry", "allocator"),
    ("wire", "codecs", "storage", "parts", "spoolfile", "datasets", "server"),
    ("operators", "metrics", "connectors", "tracing"),
    ("pipelines",),
    ("replay", "bench", "report", "integrations", "capacity", "testing", "pipetest", "tap", "dictionaries"),
    ("api", "cli"),
]
LAYER = {name: level for level, names in enumerate(LAYERS) for name in names}


def test_no_import_cycles_between_units_or_files() -> None:
    problems = report(str(SRC), "wirepipe")
    assert problems == [], "\n".join(problems)


def test_the_checker_finds_a_deferred_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from ..high import b\n")
    (pkg / "high.py").write_text("from typing import TYPE_CHECKING\nfrom .low import a\n")
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import x\n")
    (pkg / "util.py").write_text("from pkg import typed\n")
    edges = file_graph(str(tmp_path), "pkg")
    assert edges["pkg.low.a"] == {"pkg.high"}  # a deferred import counts
    assert edges["pkg.typed"] == set()  # a TYPE_CHECKING import does not
    assert cycles(unit_graph(edges, "pkg")) == [["pkg.high", "pkg.low"]]
    assert cycles(edges) == [["pkg.high", "pkg.low.a"]]
    assert report(str(tmp_path), "pkg") == ["unit cycle: pkg.high <-> pkg.low", "file cycle: pkg.high <-> pkg.low.a"]


def test_the_checker_counts_the_else_branch_of_type_checking(tmp_path: Path) -> None:
    """Only the ``if TYPE_CHECKING:`` body never runs: its ``else:`` (or ``elif``) runs at import time, and
    a cycle through it is one; ``if not TYPE_CHECKING:`` the other way round."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from .c import C\n"
                              "else:\n    from .b import B\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    from . import a\n"
                              "else:\n    from .c import C\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
                              "elif True:\n    from .b import B\n")
    edges = file_graph(str(tmp_path), "pkg")
    assert edges == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.b"}}
    assert report(str(tmp_path), "pkg") == ["unit cycle: pkg.a <-> pkg.b", "file cycle: pkg.a <-> pkg.b"]


def test_every_unit_has_a_layer_and_imports_only_down() -> None:
    edges = file_graph(str(SRC), "wirepipe")
    units = {unit(m).split(".")[1] for m in edges if m != "wirepipe"}
    assert units - set(LAYER) == set(), "new units: give them a layer here and in the README's Layout section"
    upward = sorted(f"{m} -> {t}" for m, targets in edges.items() if m != "wirepipe" for t in targets
                    if unit(t) != "wirepipe" and LAYER[unit(t).split(".")[1]] > LAYER[unit(m).split(".")[1]])
    assert upward == [], "imports that point up the layer order:\n" + "\n".join(upward)


def test_the_readme_states_the_layer_order() -> None:
    readme = (SRC.parent / "README.md").read_text(encoding="utf-8")
    for names in LAYERS:
        assert " ".join(f"`{n}`" for n in names) in readme, names


def test_source_composition_needs_no_import_from_connectors_to_pipelines() -> None:
    """``source | op | sink`` works once the pipelines layer is loaded (it registers the builder), and
    says what to import when it is not (connectors never import the layer above them)."""
    import subprocess
    import sys

    code = ("from wirepipe.connectors.generate import GenerateSource\n"
            "from wirepipe.connectors.files import NullSink\n"
            "try:\n    GenerateSource('point', count=3) | NullSink()\n"
            "except TypeError as exc:\n    print('refused:', exc)\n"
            "import wirepipe.pipelines.pipeline\n"
            "print('stats:', (GenerateSource('point', count=3) | NullSink()).run().records_out)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: source | ... builds a wirepipe Pipeline: import wirepipe.pipelines.pipeline" in out.stdout
    assert "stats: 3" in out.stdout
