"""Shared fixtures (the built-in programs' helpers are in tests/builtin.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def own_redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server for one test (a real process)."""
    from mugraph.storage.redis_server import EmbeddedRedis

    with EmbeddedRedis(tmp_path / "own-redis") as server:
        yield server.url
