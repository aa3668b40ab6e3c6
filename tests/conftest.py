"""Shared fixtures. The real-nats-server ones live in nats_fixtures.py (reusable by any test module)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats_fixtures import nats_cluster, nats_server, nats_url, tls_files  # noqa: F401 - pytest fixtures
from wirepipe.connectors.nats.server import EmbeddedServer

# Under CI=true (hypothesis's "ci" profile) each @settings test's settings fall back to the previous
# one's, and reading them recurses once per earlier test: past ~1,000 hypothesis tests in one session
# that hit Python's default limit of 1,000 frames (hypothesis 6.15x; reproduced with CI=true only).
sys.setrecursionlimit(max(sys.getrecursionlimit(), 50_000))


@pytest.fixture
def nats_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for configs that talk to NATS: ``NATS_URL`` of a fresh server whose POINTS stream
    (the one the example consumers read) already holds 2000 point records."""
    from tests.nats_fixtures import fill_points

    with EmbeddedServer(store_dir=tmp_path / "nats-env") as server:
        asyncio.run(fill_points(server.url, 2000))
        yield {"NATS_URL": server.url}
