"""No dangling references: every relative link of the README resolves, and nothing points at a file the
repository does not hold. (mkdocs build --strict, in .ci/run, checks the links between the docs' pages.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = _relative_links(ROOT / "README.md")
    assert links, "the README links into the docs"
    for link in links:
        target, _, anchor = link.partition("#")
        path = ROOT / target
        assert path.exists(), f"README.md links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"README.md links to {link}: no such heading"


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    suffixes = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".c", ".pyi", ".proto", ""}
    return [ROOT / p for p in out.splitlines() if Path(p).suffix in suffixes and (ROOT / p).is_file()]


@pytest.mark.parametrize("pattern", [r"DESIGN\.md", r"\.\./shared", r"FIELD-NOTES", r"STYLE\.md", r"\bseeds\b"])
def test_nothing_points_at_notes_the_repository_does_not_hold(pattern: str) -> None:
    """Design notes outside the repository are not a reference a reader can follow."""
    here = Path(__file__).resolve()
    found = []
    for path in _tracked_text_files():
        if path.resolve() == here:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if re.search(pattern, line, re.I):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, found


def test_paths_the_docs_name_exist() -> None:
    """A file the README or the docs name in backticks (`tests/test_x.py`, `configs/y.yaml`) is in the repository."""
    named = re.compile(r"`((?:src|tests|configs|benchmarks|deploy|docs|\.ci)/[\w./-]+\.\w+)`")
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path in named.findall(page.read_text(encoding="utf-8")):
            if not (ROOT / path).exists() and not path.startswith("src/wirepipe/_sizes"):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, missing
