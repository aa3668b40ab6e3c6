"""The reference pages generated from the code (docs/gen_reference.py) are the ones committed, and the
command tables of the README and the tour list every command the CLI has."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_reference", module)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_pages_are_up_to_date() -> None:
    stale = [str(path.relative_to(ROOT)) for path, text in _generator().pages().items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"{', '.join(stale)} differ from the code: run `python docs/gen_reference.py` and commit them"


def test_the_configuration_reference_names_every_registered_part() -> None:
    from wirepipe.connectors import SINKS, SOURCES
    from wirepipe.operators import OPERATORS

    page = (ROOT / "docs" / "reference" / "configuration.md").read_text(encoding="utf-8")
    for name in SOURCES:
        assert f"### `{name}` source" in page
    for name in SINKS:
        assert f"### `{name}` sink" in page
    for name, entry in OPERATORS.items():
        assert f"### `{name}`\n" in page
        model = getattr(entry, "__origin__", entry)
        for field, info in model.model_fields.items():
            assert f"| `{info.alias or field}` |" in page, (name, field)


def test_the_cli_reference_has_every_option_of_every_command() -> None:
    generator = _generator()
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for path, command in generator.commands():
        assert f"`{path}`" in page, path
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}`" in page, (path, param.opts[0])


def _command_table(page: Path, heading: str) -> list[list[str]]:
    """The code spans of the first cell of each row of a page's command table, ``wirepipe`` dropped."""
    text = page.read_text(encoding="utf-8")
    table = text[text.index(heading):].split("\n\n")[1]
    rows = [re.split(r"(?<!\\)\|", line)[1] for line in table.splitlines()[2:]]
    return [[span.removeprefix("wirepipe ") for span in re.findall(r"`([^`]+)`", row)] for row in rows]


@pytest.mark.parametrize(("page", "heading"), [("README.md", "### The command line"), ("docs/tour.md", "## The command line")])
def test_the_command_table_lists_every_command_of_the_cli(page: str, heading: str) -> None:
    """Every command ``wirepipe --help`` shows (a group's, too: ``schema config``), and none it does not."""
    paths = [path.removeprefix("wirepipe ") for path, _ in _generator().commands() if path != "wirepipe"]
    commands = [p for p in paths if not any(other.startswith(p + " ") for other in paths)]  # groups aside
    spans = [span for row in _command_table(ROOT / page, heading) for span in row]
    named = {next((c for c in commands if f"{span} ".startswith(c + " ")), span) for span in spans}
    assert {"run", "ps", "schema config", "dict show"} <= set(commands) and "schema" not in commands
    assert sorted(set(commands) - named) == [], f"{page}'s command table leaves these out"
    assert sorted(named - set(commands)) == ["--version"], f"{page}'s command table names commands the CLI has not"


def test_the_architecture_page_states_the_layer_order_of_pyproject() -> None:
    """The layers are declared once, as import-linter contracts; the page lists them in that order."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the toml extra's tomli
        import tomli as tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for number, layer in enumerate(layers, 1):
        assert f"{number}. `{layer}`" in page, layer


def layout_sections(page: str) -> dict[str, str]:
    """The layout tree of docs/architecture.md by its top-level entries (``core/``, ``datasets.py`` ...): each entry's
    text, the lines indented beneath it (a subpackage's included)."""
    tree = re.search(r"^```text\nsrc/wirepipe/\n(.*?)^```", page, re.S | re.M)
    assert tree, "docs/architecture.md has no layout tree (```text, src/wirepipe/)"
    sections: dict[str, str] = {}
    name = ""
    for line in tree.group(1).splitlines():
        top = re.match(r"  (\S+)", line)
        if top:
            name = top.group(1)
            sections[name] = ""
        elif line[:1].strip():  # past src/wirepipe/: configs/, tests/ ...
            name = ""
        if name:
            sections[name] += line + "\n"
    return sections


def layout_problems(src: Path, page: str) -> list[str]:
    """The modules of ``src`` that the layout tree does not name in their top-level package's entry, and the
    modules it names there that are not in the package."""
    sections = layout_sections(page)
    problems = []
    modules = {p.relative_to(src) for p in src.rglob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    for module in sorted(modules):
        top = module.parts[0] if len(module.parts) == 1 else f"{module.parts[0]}/"
        if not re.search(rf"(?<![\w/]){re.escape(module.name)}\b", sections.get(top, "")):
            problems.append(f"{module.as_posix()}: not named under {top} in the layout")
    names = {(f"{m.parts[0]}/" if len(m.parts) > 1 else m.parts[0], m.name) for m in modules}
    for top, text in sections.items():
        problems += [f"{top}: names {name}, which is not in the package" for name in re.findall(r"\b(\w+\.py)\b", text)
                     if (top, name) not in names and top.endswith("/")]
    return problems


def test_the_architecture_page_names_every_module_where_it_is() -> None:
    """The layout tree lists each module under its package, and no module the package does not have."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert layout_problems(ROOT / "src" / "wirepipe", page) == []


def test_the_layout_check_sees_a_module_left_out_and_one_gone(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    for name in ("core/units.py", "core/new.py", "api.py"):
        (tmp_path / name).write_text("")
    page = ("```text\nsrc/wirepipe/\n  core/   units.py (30s), gone.py\n  api.py  the factories\n"
            "tests/  cli.py\n```\n")
    assert layout_problems(tmp_path, page) == ["core/new.py: not named under core/ in the layout",
                                               "core/: names gone.py, which is not in the package"]
