"""--time-limit holds when the driver falls behind its workers: results wait in a long batch, and the
limit is checked per result, not per batch; what was not handled reruns on resume."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

BUDGET = 5  # tasks of a few states each: workers finish them far faster than this driver handles them
HANDLING_SECONDS = 0.2
LIMIT = 6.0


def test_a_driver_behind_its_workers_stops_at_the_limit_and_resumes(tmp_path: Path) -> None:
    from mugraph.pipeline.driver import Driver, drain_seconds
    from mugraph.pipeline.plan import make_plan
    from mugraph.pipeline.records import SearchTaskResult
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    class SlowDriver(Driver):
        """Handles each search result slowly, as a driver sharing its core with busy workers does."""

        def _on_search(self, row: int, fragment: int, result: SearchTaskResult) -> None:
            time.sleep(HANDLING_SECONDS)
            super()._on_search(row, fragment, result)

        def _loop(self) -> bool:
            stopped = super()._loop()
            loop_ends.append(time.perf_counter())
            return stopped

    loop_ends: list[float] = []

    plan = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
    with search_cluster(workers=2) as client:
        with open_run(tmp_path / "run.zarr", plan) as store:
            t0 = time.perf_counter()
            stopped = SlowDriver(plan, store, client, time_limit=LIMIT).run()
            loop_end = t0 + LIMIT + HANDLING_SECONDS  # at most one result past the limit
            assert not stopped["complete"]
            # the loop stops within one result's handling of the limit (plus one gather of finished
            # results); the final ranking after it is bounded separately below
            assert loop_ends[0] - t0 < LIMIT + 2 * HANDLING_SECONDS + 2.0, loop_ends[0] - t0
            # cancelling, the confirmations of what was found (`drain_seconds` at most) and the ranking
            assert time.perf_counter() < loop_end + drain_seconds(LIMIT) + 10
            pending_after_stop = store.task_summary().get("pending", 0)
            assert pending_after_stop > 0
        with open_run(tmp_path / "run.zarr", plan) as store:
            whole = Driver(plan, store, client).run()
            assert whole["complete"] and store.task_summary().get("pending", 0) == 0
            assert whole["tasks_run"] >= pending_after_stop


def test_a_run_stopped_at_its_limit_confirms_what_was_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store holding found μGraphs no confirmation ran for (an interrupted run's), then a run whose
    limit passes at once: the search stops, and every found μGraph is confirmed and ranked."""
    import mugraph.pipeline.driver as driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster

    class UntilFound(driver.Driver):
        """Stops at its first found μGraphs, confirming none: what a run killed early leaves."""

        def _past_limit(self, now: float) -> bool:
            return bool(self._results.found[0])

    # the drain's bound is not what is tested here: on a loaded machine 10 s may not confirm them all
    monkeypatch.setattr(driver, "DRAIN_SECONDS", (300.0, 300.0))
    plan = make_plan(get_builtin("rms_norm"), None, {}, 10000)
    with search_cluster(workers=2) as client:
        with open_run(tmp_path / "run.zarr", plan) as store:
            unconfirmed = UntilFound(plan, store, client, time_limit=3600.0)
            unconfirmed._results.confirm = lambda fragment, rec: None  # type: ignore[method-assign]
            unconfirmed.run()
            found = set(store.found(0))
            assert found and not store.confirmations(0)
        with open_run(tmp_path / "run.zarr", plan) as store:
            stopped = driver.Driver(plan, store, client, time_limit=0.01).run()
            assert not stopped["complete"]
            assert found <= set(store.confirmations(0))
            assert {r["digest"] for r in stopped["ranking"]["f0"]} == set(stopped["mugraphs"]) >= found
