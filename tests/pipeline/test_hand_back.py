"""A bundle that stops early hands its unstarted paths back, and the driver runs them again: a run
whose every bundle stops after its first path ends with the same μGraphs and the same task paths."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

BUDGET = 5  # tasks of a few states each, so paths wait many times over and bundles form

calls: list[tuple[int, int]] = []  # (paths given, results returned), per search task


def first_path_only(payload: Any, paths: Sequence[tuple[int, ...]], budget: int, seconds: float) -> Any:
    """The real search task, told it has no time left after its first path."""
    from mugraph.pipeline.worker import search_task

    out = search_task(payload, paths, budget, 0.0)
    calls.append((len(paths), len(out)))
    return out


def test_paths_handed_back_are_run_again(tmp_path: Path) -> None:
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
    runs: dict[str, tuple[set[str], set[tuple[int, ...]]]] = {}
    with search_cluster(processes=False) as client:
        for name, fn in (("whole", None), ("handed back", first_path_only)):
            with open_run(tmp_path / f"{len(runs)}.zarr", plan) as store:
                driver = Driver(plan, store, client) if fn is None else Driver(plan, store, client, search_fn=fn)
                done = driver.run()
                assert done["complete"] and store.task_summary().get("pending", 0) == 0
                tasks = store.tasks()
                found = {d for i in range(len(plan.fragments)) for d in store.found(i)}
                runs[name] = (found, {t.path for t in tasks if t.done})
    assert any(given > returned for given, returned in calls)  # bundles formed and stopped early
    assert all(returned == 1 for _, returned in calls)
    assert runs["handed back"] == runs["whole"]
    assert runs["whole"][0]  # the search found μGraphs
