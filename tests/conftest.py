"""Shared fixtures and the e2e and unit markers (helpers the tests import are in tests/helpers/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def own_redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server for one test (a real process)."""
    from mugraph.storage.memo.redis_server import EmbeddedRedis

    with EmbeddedRedis(tmp_path / "own-redis") as server:
        yield server.url


# End-to-end tests start processes (the CLI, Dask clusters, redis-server through the CLI, a browser)
# and take most of the suite's time. The default suite's other tests (not slow, not gpu), less the
# integration tests below, are marked `unit`: `python -m pytest -m unit` is the quick loop while
# working on one module (about 100 s of CPU on 2 cores, see CONTRIBUTING); the default suite runs them all.
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
# Integration tests run in-process but exercise a whole stage on real programs (narrowed searches,
# fingerprints of every expert, rankings of collected μGraphs) or several processes on one store or
# memo; each takes 0.5-7 s on 2 cores, together most of the default suite's non-e2e time (95 of 115 s
# measured), so they are not `unit`.
INTEGRATION = (
    "codegen/test_mutants.py::",
    "programs/test_names.py::test_an_interrupt_while_a_program_file_loads",
    "stages/layout/test_choose.py::test_every_confirmed_mugraph",
    "stages/layout/test_rank.py::",
    "stages/prune/test_heap.py::test_queries_reuse_the_heap",
    "stages/prune/test_models.py::test_models_satisfy_the_axioms",
    "stages/prune/test_oracle_memo.py::",
    "stages/search/test_block_inputs.py::",
    "stages/search/test_estimate.py::",
    "stages/search/test_explore.py::",
    "stages/search/test_op_tables.py::test_tables_and_listings_match_the_direct_enumeration",
    "stages/search/test_regression.py::",
    "stages/search/test_task_paths.py::test_a_run_covers_exactly_its_siblings",
    "stages/test_fragments.py::test_stitching_the_references_gives_the_program",
    "stages/verify/test_experts.py::",
    "stages/verify/test_mutants.py::",
    "stages/verify/test_reuse.py::",
    "storage/test_memo_contract.py::test_layered_two_worker_processes",
    "storage/test_record_checks.py::test_readers_beside",
    "storage/test_record_checks.py::test_an_intact_store",
    "storage/test_run_store.py::",
    "test_import_cycles.py::",
)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        rel = item.path.relative_to(TESTS)
        node = rel.as_posix() + "::" + item.name
        if rel.parts[0] in E2E_DIRS or rel.as_posix() in E2E_FILES or node.startswith(E2E_TESTS):
            item.add_marker(pytest.mark.e2e)
        elif not any(any(item.iter_markers(name)) for name in ("slow", "gpu")) and not node.startswith(INTEGRATION):
            item.add_marker(pytest.mark.unit)
