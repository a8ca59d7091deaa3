"""Shared fixtures and the e2e and unit markers (helpers the tests import are in tests/helpers/)."""

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


# End-to-end tests start processes (the CLI, Dask clusters, redis-server through the CLI, a browser)
# and take most of the suite's time. Every other test of the default suite (not slow, not gpu) is
# marked `unit`: `python -m pytest -m unit` is the quick loop while working on one module; the
# default suite runs both.
E2E_DIRS = frozenset({"pipeline", "dashboards", "torch"})
E2E_FILES = frozenset(
    {
        "test_bare_machine.py",
        "test_memo_poisoning.py",
        "test_store_path_control.py",
        "test_cli_bad_input.py",
        "test_cli_search.py",
        "test_cli_prune.py",
        "codegen/test_cli.py",
        "codegen/test_programs.py",
        "stages/search/test_explain.py",
        "storage/test_links.py",
    }
)
# Tests, by node id prefix, that run the CLI as a process inside files of unit tests.
E2E_TESTS = ("programs/test_loader.py::test_cli_",)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        rel = item.path.relative_to(TESTS)
        node = rel.as_posix() + "::" + item.name
        if rel.parts[0] in E2E_DIRS or rel.as_posix() in E2E_FILES or node.startswith(E2E_TESTS):
            item.add_marker(pytest.mark.e2e)
        elif not any(any(item.iter_markers(name)) for name in ("slow", "gpu")):
            item.add_marker(pytest.mark.unit)
