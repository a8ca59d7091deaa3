"""A fragment's root task runs on a worker other than the confirming one, so that worker's warm-up
(drawing the confirm stage's inputs) runs beside the root task instead of after it. Checked in a real
run: a local cluster of two worker processes, the real driver and tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

roots: list[str] = []  # the worker address of each root task, as the task saw it


def recording(payload: Any, paths: tuple[tuple[int, ...], ...], budget: int, hand_back: float) -> Any:
    """The real search task, recording where a root path ran."""
    from distributed import get_worker

    from mugraph.pipeline.worker import search_task

    if paths == ((),):
        roots.append(get_worker().address)
    return search_task(payload, paths, budget, hand_back)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_root_task_runs_beside_the_confirming_worker(tmp_path: Path, workers: int) -> None:
    from mugraph.pipeline.cluster import confirming_worker
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    roots.clear()
    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], 10_000)
    with search_cluster(workers, processes=False) as client, open_run(tmp_path / "run.zarr", plan) as store:
        client.wait_for_workers(workers)
        confirmer = confirming_worker(client)
        assert Driver(plan, store, client, search_fn=recording).run()["complete"]
        everyone = sorted(client.scheduler_info()["workers"])
    assert len(roots) == 1
    if workers == 1:
        assert roots == [confirmer]  # a preference: alone, the confirming worker runs it
    else:
        assert confirmer is not None and roots[0] != confirmer and roots[0] in everyone
