"""The driver confirms the μGraphs the cost model expects fastest first: a run stopped by its time
limit ranks only confirmed μGraphs, and its finds come faster than one worker confirms them. Checked
in a real run (a Dask cluster, the real tasks and driver): each confirmation runs at the Dask priority
of its μGraph's estimated speedup, computed here from the graph and the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

seen: list[tuple[str, int]] = []  # (digest, Dask user priority), per confirmation


def recording(payload: Any, digest: str, graph: str) -> Any:
    """The real confirm task, recording the priority Dask runs it at."""
    from distributed import get_worker
    from distributed.utils import thread_state  # type: ignore[attr-defined]

    from mugraph.pipeline.worker import confirm_task

    priority = get_worker().state.tasks[thread_state.key].priority
    assert priority is not None
    seen.append((digest, -priority[0]))
    return confirm_task(payload, digest, graph)


def test_confirm_priority_orders_by_speedup_above_every_other_task() -> None:
    from mugraph.pipeline.bundling import rank_priority, search_priority
    from mugraph.pipeline.dispatch import CONFIRM_PRIORITY, LAYOUT_PRIORITY, confirm_priority

    ladder = [confirm_priority(s) for s in (None, 0.0, 0.5, 1.0, 1.36, 2.88, 13.73, 1e9)]
    assert ladder == sorted(ladder) and len(set(ladder)) == len(ladder) - 1  # 0 and None: no estimate
    assert ladder[0] == CONFIRM_PRIORITY > LAYOUT_PRIORITY > max(rank_priority(0), search_priority(()))
    assert confirm_priority(float("nan")) == CONFIRM_PRIORITY


def test_each_confirmation_runs_at_its_estimated_speedup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mugraph.ir.serialize import loads
    from mugraph.pipeline import driver as driver_module
    from mugraph.pipeline.dispatch import confirm_priority
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from mugraph.stages.layout.emitted import estimate_emitted
    from mugraph.stages.layout.profiles import DEFAULT_PROFILE, get_profile
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    monkeypatch.setattr(driver_module, "confirm_task", recording)
    seen.clear()
    wider = {**NARROW["rms_norm"], "grids": [[64, 1, 1], [128, 1, 1]], "franges": [16, 64]}  # 4 μGraphs, 4 speeds
    plan = make_plan(get_builtin("rms_norm"), None, wider, 10_000)
    with search_cluster(processes=False) as client, open_run(tmp_path / "run.zarr", plan) as store:
        assert Driver(plan, store, client).run()["complete"]
        found = store.found(0)
    profile = get_profile(DEFAULT_PROFILE)
    reference = estimate_emitted(plan.fragments[0].spec.graph, profile).seconds
    expected = {
        d: confirm_priority(reference / estimate_emitted(loads(r.graph), profile).seconds) for d, r in found.items()
    }
    assert sorted(d for d, _ in seen) == sorted(found)  # each found μGraph confirmed once
    assert dict(seen) == expected
    assert len(set(expected.values())) > 2  # the model tells them apart
