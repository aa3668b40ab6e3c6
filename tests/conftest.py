"""Shared fixtures and the suite's lanes.

The real-nats-server fixtures (``make_server``, ``nats_server``, ``make_cluster``, ``nats_cluster``...) live in
nats_fixtures.py (a plugin the root conftest.py loads); the command line is driven through cli.py. Here:
``make_pipeline`` (pipeline files in ``tmp_path``), ``nats_env``, and the markers.

- ``slow``: process-level fault tests (every test under ``tests/chaos/``, marked here) and tests of seconds;
  ``python -m pytest -m "not slow"`` is the fast lane for development.
- ``serial``: tests that need a quiet machine (a scenario that must overload a consumer): a spread run runs
  them after all the others, alone (``SerialLast`` in the root conftest.py); a run of named files runs them in
  order with the rest.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from wirepipe.connectors.nats.server import EmbeddedServer

# Under CI=true (hypothesis's "ci" profile) each @settings test's settings fall back to the previous
# one's, and reading them recurses once per earlier test: past ~1,000 hypothesis tests in one session
# that hit Python's default limit of 1,000 frames (hypothesis 6.15x; reproduced with CI=true only).
sys.setrecursionlimit(max(sys.getrecursionlimit(), 50_000))

CHAOS = Path(__file__).parent / "chaos"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/chaos/ is slow (a real-process fault test)."""
    for item in items:
        if item.path.is_relative_to(CHAOS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def make_pipeline(tmp_path: Path) -> Callable[..., Path]:
    """A factory of pipeline files: ``make_pipeline(config, name=None)`` writes ``config`` (a dict, dumped as
    YAML, or the YAML text) to ``tmp_path/NAME.yaml`` (NAME: ``name``, else the config's own ``name``) and
    returns the path."""

    def make(config: dict[str, Any] | str, name: str | None = None) -> Path:
        text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False)
        stem = name or (yaml.safe_load(text) or {}).get("name") or "pipeline"
        path = tmp_path / f"{stem}.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return make


@pytest.fixture
def nats_env(make_server: Callable[..., EmbeddedServer], tmp_path: Path) -> dict[str, str]:
    """Environment for configs that talk to NATS: ``NATS_URL`` of a fresh server whose POINTS stream
    (the one the example consumers read) already holds 2000 point records."""
    from tests.nats_fixtures import fill_points

    server = make_server(store_dir=tmp_path / "nats-env")
    asyncio.run(fill_points(server.url, 2000))
    return {"NATS_URL": server.url}
