"""A worker's searcher caches take a share of its memory limit, and shrink when the process grows
past a guard: the driver's order by rank starts most tasks away from the last one's frontier, where
held nodes spare the replays (benchmarks/RESULTS.md, "Searcher caches sized by the worker's memory")."""

from __future__ import annotations

from typing import Any

from mugraph.pipeline.plan import make_plan
from mugraph.pipeline.worker import CACHE_BYTES, CACHE_GUARD, CACHE_MAX, CACHE_SHARE, WorkerState, cache_weight
from mugraph.programs import get_builtin
from mugraph.stages.search.explore import CACHE_WEIGHT
from tests.helpers.narrow import NARROW

GIB = 1 << 30


def test_the_weight_follows_the_memory_limit_between_the_old_default_and_the_cap() -> None:
    assert cache_weight(2 * GIB) == int(2 * GIB * CACHE_SHARE) // CACHE_BYTES
    assert CACHE_WEIGHT < cache_weight(2 * GIB) < cache_weight(4 * GIB) < CACHE_MAX
    assert cache_weight(64 * GIB) == CACHE_MAX
    assert cache_weight(100 << 20) == CACHE_WEIGHT  # a small worker keeps what every searcher had
    assert CACHE_WEIGHT <= cache_weight(None) <= CACHE_MAX  # no limit: the machine's memory per core


def test_a_searcher_gets_the_weight_and_the_guard_halves_it_down_to_the_old_default() -> None:
    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], 50)
    payload = plan.fragments[0].payload
    limit = 4 * GIB
    state = WorkerState(None, "numpy", limit)
    searcher = state.searcher(payload)
    assert searcher.cache_weight == state.cache_weight == cache_weight(limit)
    searcher.explore((), 50)  # something held, so a resize has entries to drop
    state.fit_caches(int(CACHE_GUARD * limit))  # at the guard: nothing changes
    assert searcher.cache_weight == cache_weight(limit)
    state.fit_caches(int(CACHE_GUARD * limit) + 1)
    assert searcher.cache_weight == cache_weight(limit) // 2
    assert state.searcher(payload) is searcher and state.cache_weight == cache_weight(limit) // 2
    for _ in range(20):
        state.fit_caches(limit)
    assert searcher.cache_weight == state.cache_weight == CACHE_WEIGHT
    # A worker without a memory limit never shrinks its caches.
    free = WorkerState(None, "numpy", None)
    free.fit_caches(1 << 50)
    assert free.cache_weight == cache_weight(None)


def _worker_weights(dask_worker: Any) -> tuple[int | None, int]:
    """The worker's memory limit and its plugin state's cache weight (`Client.run` passes the worker)."""
    return dask_worker.memory_manager.memory_limit, dask_worker.plugins["mugraph"].state.cache_weight


def test_a_real_worker_sizes_its_caches_by_its_own_memory_limit() -> None:
    from distributed import Client, LocalCluster

    from mugraph.pipeline.worker import MugraphPlugin

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit="2GiB"
        ) as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(MugraphPlugin(None, "numpy"), name="mugraph")
        ((limit, weight),) = client.run(_worker_weights).values()
    assert limit == 2 * GIB and weight == cache_weight(2 * GIB)
