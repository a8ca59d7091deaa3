"""The driver submits each search task at the priority of its path's rank: the sum, from the root, of
each step's place among its kept siblings in exploration order (a run's: its first child's). Checked
in a real run (a Dask cluster, the real search task and driver) against the ranks a searcher computes
from the tree itself, so the chain from the worker's frontier ranks through the commit to Dask's
priority is what is tested."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BUDGET = 2  # tasks of a few states each, so the run makes many tasks at many depths

seen: list[tuple[tuple[tuple[int, ...], ...], int]] = []  # (paths, Dask user priority), per search task


def recording(payload: Any, paths: Sequence[tuple[int, ...]], budget: int, seconds: float) -> Any:
    """The real search task, recording the priority Dask runs it at."""
    from distributed import get_worker
    from distributed.utils import thread_state  # type: ignore[attr-defined]

    from mugraph.pipeline.worker import search_task

    priority = get_worker().state.tasks[thread_state.key].priority
    assert priority is not None
    seen.append((tuple(paths), -priority[0]))
    return search_task(payload, paths, budget, seconds)


def _rank_of() -> Callable[[tuple[int, ...]], int]:
    """A task's rank as computed from the tree itself (a searcher of the same narrow rms_norm)."""
    from mugraph.stages.search.task_paths import split_run
    from tests.helpers.search import searcher

    s = searcher("rms_norm")

    def rank(task: tuple[int, ...]) -> int:
        run = split_run(task)
        path = task if run is None else (*run.parent, run.first)
        places = [s.kept_children(path[:d])[0].position(path[d]) for d in range(len(path))]
        assert None not in places
        return sum(p for p in places if p is not None)

    return rank


def test_each_search_task_runs_at_its_best_paths_rank(tmp_path: Path) -> None:
    from mugraph.pipeline.bundling import rank_priority, search_priority
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    seen.clear()
    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
    with search_cluster(processes=False) as client, open_run(tmp_path / "run.zarr", plan) as store:
        assert Driver(plan, store, client, search_fn=recording).run()["complete"]
        stored = {t.path: t.rank for t in store.tasks()}
    rank = _rank_of()
    assert seen[0] == (((),), search_priority(()))  # the root: no rank known yet
    ranked = seen[1:]
    assert len(ranked) > 10
    for paths, priority in ranked:
        assert priority == max(rank_priority(rank(p)) for p in paths) == rank_priority(rank(paths[0]))
    assert len({priority for _, priority in ranked}) > 3  # ranks, not a handful of depths
    assert stored.pop(()) is None  # the store keeps every other row's rank
    assert stored == {path: rank(path) for path in stored}


def test_a_resumed_run_submits_its_pending_rows_at_their_ranks(tmp_path: Path) -> None:
    from mugraph.pipeline.bundling import rank_priority
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.pipeline.records import SearchTaskResult
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    class Stopped(Driver):
        """Stops as a time limit would, after a fixed number of search results (not a time)."""

        handled = 0

        def _on_search(self, row: int, fragment: int, result: SearchTaskResult) -> None:
            super()._on_search(row, fragment, result)
            self.handled += 1

        def _past_limit(self, now: float) -> bool:
            return self.handled >= 6

    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
    with search_cluster(processes=False) as client:
        with open_run(tmp_path / "run.zarr", plan) as store:
            assert not Stopped(plan, store, client).run()["complete"]
            pending = {t.path for t in store.pending()}
        seen.clear()
        with open_run(tmp_path / "run.zarr", plan) as store:
            assert Driver(plan, store, client, search_fn=recording).run()["complete"]
    rank = _rank_of()
    assert len(pending) > 3
    resumed = [(paths, priority) for paths, priority in seen if set(paths) <= pending]
    assert {p for paths, _ in resumed for p in paths} == pending  # each pending row ran after the resume
    for paths, priority in resumed:
        assert priority == rank_priority(rank(paths[0]))  # at its rank, not shallower first
