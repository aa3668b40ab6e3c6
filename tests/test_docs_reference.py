"""The reference pages generated from the code (docs/gen_reference.py) are the ones committed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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
