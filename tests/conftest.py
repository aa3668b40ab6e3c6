"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def nats_env() -> dict[str, str]:
    """Environment for configs that talk to NATS (extended when NATS connectors exist)."""
    return {}
