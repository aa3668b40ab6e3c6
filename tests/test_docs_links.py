"""No dangling references: every relative link of the README resolves, and nothing points at a file the
repository does not hold. (mkdocs build --strict, in .ci/run, checks the links between the docs' pages.)
And nothing left out: the home page and the README's documentation list reach every page of the nav."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def _nav_pages() -> list[tuple[str, str]]:
    """(section, page) for every page of mkdocs.yml's nav, ``how-to/tap.md`` relative to docs/."""
    def walk(entries: list, section: str) -> list[tuple[str, str]]:
        out = []
        for entry in entries:
            for title, value in entry.items():
                out += walk(value, title) if isinstance(value, list) else [(section, value)]
        return out

    return walk(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"], "")


def _linked_pages(text: str, base: str) -> set[str]:
    """The pages a Markdown text links to, relative to docs/ (``base`` is where its links start from)."""
    targets = LINK.findall(FENCE.sub("", text))
    return {str(Path(base, t.partition("#")[0])).removeprefix("./") for t in targets if not re.match(r"[a-z]+:", t)}


def test_mkdocs_nav_has_every_how_to_page() -> None:
    """The guard of the tests below: a how-to page left out of the nav would be left out of them too."""
    in_nav = {page for _, page in _nav_pages()}
    on_disk = {f"how-to/{p.name}" for p in (ROOT / "docs" / "how-to").glob("*.md")}
    assert on_disk - in_nav == set(), "how-to pages missing from mkdocs.yml's nav"
    assert len(on_disk) == len([1 for section, _ in _nav_pages() if section == "How-to guides"])


def test_the_home_page_reaches_every_page_of_the_nav() -> None:
    """Every task (each how-to guide), concept and reference page is one click from the home page."""
    linked = _linked_pages((ROOT / "docs" / "index.md").read_text(encoding="utf-8"), ".")
    missing = [page for _, page in _nav_pages() if page != "index.md" and page not in linked]
    assert not missing, f"docs/index.md links to none of {missing}"


def test_the_readme_documentation_list_reaches_every_guide_concept_and_reference() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    doc_list = readme[readme.index("## Documentation"):]
    linked = {page.removeprefix("docs/") for page in _linked_pages(doc_list, ".")}
    wanted = [page for section, page in _nav_pages() if section in ("How-to guides", "Concepts", "Reference")]
    missing = [page for page in wanted if page not in linked]
    assert not missing, f"README.md's Documentation list links to none of {missing}"


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
