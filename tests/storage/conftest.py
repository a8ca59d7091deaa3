"""Fixtures for the memo tests: private redis-servers (real processes, never mocks). The helpers the
tests and their worker processes import are in tests/helpers/memo.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mugraph.storage.memo.redis_server import EmbeddedRedis


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """One private redis-server for the whole session (tests that do not kill or restart it)."""
    with EmbeddedRedis(tmp_path_factory.mktemp("shared-redis")) as server:
        yield server


@pytest.fixture
def redis_url(shared_redis: EmbeddedRedis) -> Iterator[str]:
    """The shared server's URL, emptied before each test."""
    client = redis.Redis.from_url(shared_redis.url, protocol=2)
    client.flushdb()
    yield shared_redis.url
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A private redis-server for one test (which may kill or restart it)."""
    server = EmbeddedRedis(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
