"""No module of the package passes 600 lines: one past that holds more than one concept (docs/architecture.md
lists each module's); split it by concept, as ``pipelines/pipeline.py`` (the definition) and ``run.py`` (a run)
were."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "wirepipe"
MAX_LINES = 600


def long_modules(root: Path) -> dict[str, int]:
    """The modules under ``root`` with more than ``MAX_LINES`` lines, and their lengths."""
    lengths = {path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in sorted(root.rglob("*.py"))}
    return {name: n for name, n in lengths.items() if n > MAX_LINES}


def test_no_module_of_the_package_passes_600_lines() -> None:
    assert long_modules(SRC) == {}


def test_the_check_sees_a_module_of_601_lines(tmp_path: Path) -> None:
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path) == {"pkg/long.py": 601}
