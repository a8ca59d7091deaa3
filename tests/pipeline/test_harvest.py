"""A run stopped at its time limit keeps what its running searches had found: each search cut at the
limit hands in its finds (stamped when its walk made them) and its task stays pending, so the
stopped run confirms and ranks them, and resuming it gives the tree and the μGraphs of a run never
stopped."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

LIMIT = 3.0
STEP_SECONDS = 0.02  # per node expansion in the slowed walk: narrowed gated_mlp's one walk takes 12 s
WHOLE = 10**9  # a node budget no walk reaches: the root's task walks the whole space


def slowed(
    payload: Any, paths: Sequence[tuple[int, ...]], budget: int, seconds: float, deadline: float | None = None
) -> Any:
    """The real search task, each node expansion of its walk made STEP_SECONDS slower: the walk is
    still running at the limit whatever the machine's load, and has found its first μGraph (after
    21 expansions) well before."""
    from mugraph.pipeline import worker

    searcher = worker._state().searcher(payload)
    expand = searcher.expansion

    def slow(node: Any) -> Any:
        time.sleep(STEP_SECONDS)
        return expand(node)

    searcher.expansion = slow  # type: ignore[method-assign]
    try:
        return worker.search_task(payload, paths, budget, seconds, *([] if deadline is None else [deadline]))
    finally:  # the worker's later tasks (the resumed and fresh runs) walk at full speed
        del searcher.expansion


def _tree(store: Any) -> tuple[list[tuple[Any, ...]], dict[str, tuple[tuple[int, ...], int]]]:
    tasks = [(t.row, t.fragment, t.path, t.parent, t.done) for t in store.tasks()]
    return tasks, {d: (r.path, r.task) for d, r in store.found(0).items()}


def test_a_search_running_at_the_limit_hands_in_its_finds(tmp_path: Path) -> None:
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    plan = make_plan(get_builtin("gated_mlp"), None, NARROW["gated_mlp"], WHOLE)
    with search_cluster(workers=1) as client:
        with open_run(tmp_path / "stopped.zarr", plan) as store:
            stopped = Driver(plan, store, client, time_limit=LIMIT, search_fn=slowed).run()
            assert not stopped["complete"]
            (root,) = store.tasks()
            assert not root.done  # cut: pending, to run again whole
            found = store.found(0)
            assert found, "the walk running at the limit had found a μGraph; the stopped run lost it"
            assert all(r.task == root.row for r in found.values())
            # stamped when the walk found it, not when the driver stored it (after the limit)
            assert all(r.seconds is not None and r.seconds < LIMIT for r in found.values())
            # confirmed and ranked by the stopped run, as what a finished search found is
            assert set(stopped["mugraphs"]) == set(found)
        with open_run(tmp_path / "stopped.zarr", plan) as store:
            assert Driver(plan, store, client).run()["complete"]
            resumed = _tree(store)
        with open_run(tmp_path / "fresh.zarr", plan) as store:
            assert Driver(plan, store, client).run()["complete"]
            assert resumed == _tree(store)


def test_a_task_starting_past_the_deadline_explores_nothing() -> None:
    from mugraph.pipeline.plan import make_plan
    from mugraph.pipeline.worker import search_task
    from mugraph.programs import get_builtin
    from tests.helpers.narrow import NARROW

    plan = make_plan(get_builtin("gated_mlp"), None, NARROW["gated_mlp"], WHOLE)
    payload = plan.fragments[0].payload
    assert search_task(payload, ((),), WHOLE, None, time.time() - 1.0) == ()
    (whole,) = search_task(payload, ((),), WHOLE, None, time.time() + 3600.0)
    assert not whole.cut and whole.found and len(whole.found_at or ()) == len(whole.found)


def test_a_walk_cut_at_its_deadline_keeps_its_finds_and_leaves_no_frontier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock passes the deadline after a set number of readings: the walk stops there, with the
    finds the uncut walk had made by then, and no frontier (its task is not done)."""
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from mugraph.stages.search.explore import Searcher
    from tests.helpers.narrow import NARROW

    plan = make_plan(get_builtin("gated_mlp"), None, NARROW["gated_mlp"], WHOLE)
    fragment = plan.fragments[0].payload.fragment()
    whole = Searcher(fragment).explore((), WHOLE)
    assert whole.found and not whole.cut

    readings = iter(range(10**9))
    deadline = 300  # readings of the clock: past the first find (21 expansions), short of the whole walk
    monkeypatch.setattr(time, "time", lambda: float(next(readings)))  # the walk's clock (`explore`)
    cut = Searcher(fragment).explore((), WHOLE, float(deadline))
    assert cut.cut and cut.frontier == [] and cut.ranks == []
    assert cut.found and set(cut.found) <= set(whole.found)
    assert set(cut.found_at) == set(cut.found)
    assert cut.counters.nodes < whole.counters.nodes
