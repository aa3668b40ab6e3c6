"""Shared fixtures. The real-nats-server ones live in nats_fixtures.py (reusable by any test module)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats_fixtures import nats_cluster, nats_server, nats_url, tls_files  # noqa: F401 - pytest fixtures
from wirepipe.server import EmbeddedServer


@pytest.fixture
def nats_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for configs that talk to NATS: ``NATS_URL`` of a fresh server whose POINTS stream
    (the one the example consumers read) already holds 2000 point records."""
    from tests.nats_fixtures import fill_points

    with EmbeddedServer(store_dir=tmp_path / "nats-env") as server:
        asyncio.run(fill_points(server.url, 2000))
        yield {"NATS_URL": server.url}
