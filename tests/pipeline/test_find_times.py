"""Find times on a real run (rms_norm, one Dask worker process, a real Zarr store), stopped after its
first find and resumed: every found μGraph says when the run's walk found it and the states the
run had explored when it was stored, within the run's totals, unchanged by the resume; and what
`status`, the report's curve and `best_at` make of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mugraph.dashboards.find_times import best_at, run_seconds
from mugraph.dashboards.report import report_data
from mugraph.pipeline.events import Event
from mugraph.storage.run.store import RunStore
from tests.helpers.narrow import NARROW

# the narrowed rms_norm space with one more grid and for-loop range: three μGraphs, in about 6 s
WIDER = {**NARROW["rms_norm"], "grids": [[64, 1, 1], [32, 1, 1]], "franges": [16, 64]}
BUDGET = 40
Resumed = tuple[Path, dict[str, Any], list[tuple[str, float, int]]]


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory: pytest.TempPathFactory) -> Resumed:
    """The store of a run stopped right after its first find was committed and then resumed to the
    end; the find times after the first invocation, and every `found` event in order."""
    import mugraph.pipeline.driver as driver
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.plan import make_plan
    from mugraph.pipeline.records import finds_only
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster

    class StopAtFirstFind(Driver):
        """Stops as a time limit would, once a handled task has found a μGraph: checked per task
        result, so the tasks of a batch handled after it stay pending for the resume (a loaded
        machine hands the driver large batches, which would otherwise commit every find at once)."""

        def _past_limit(self, now: float) -> bool:
            return any(self._results.found) or any(s.result.found for s in self._results.staged)

        def _harvest(self, searches: list[Any]) -> None:
            self.client.cancel(searches)  # what the running tasks found is left to the resume

    store_path = tmp_path_factory.mktemp("find-times") / "run.zarr"
    order: list[tuple[str, float, int]] = []

    def on_event(e: Event) -> None:
        if e["event"] == "found":
            order.append((e["digest"], e["seconds"], e["states"]))

    plan = make_plan(get_builtin("rms_norm"), None, WIDER, BUDGET)
    with search_cluster() as client, pytest.MonkeyPatch.context() as mp:
        # the results handled past the stop keep no finds either, so the resume has some to make
        mp.setattr(driver, "finds_only", lambda r: dataclasses.replace(finds_only(r), found=(), found_at=()))
        with open_run(store_path, plan) as store:
            first = StopAtFirstFind(plan, store, client, on_event=on_event, progress_interval=0.2).run()
            assert not first["complete"]
            before = {
                "found": {d: (r.seconds, r.states) for d, r in store.found(0).items()},
                "seconds": run_seconds(store.timeline()),
                "states": store.task_summary()["counters"]["nodes"],
            }
        with open_run(store_path, plan) as store:
            whole = Driver(plan, store, client, on_event=on_event, progress_interval=0.2).run()
            assert whole["complete"]
    return store_path, before, order


def test_find_times_follow_the_finds_within_the_run(resumed_run: Resumed) -> None:
    path, _, order = resumed_run
    with RunStore.open_existing(path) as st:
        found = st.found(0)
        total_seconds = run_seconds(st.timeline())
        total_states = st.task_summary()["counters"]["nodes"]
        confirmed = st.confirmations(0)
    # each find announced once across both invocations, with the find time its record keeps
    assert sorted(d for d, _, _ in order) == sorted(found) and len(found) >= 2
    times = [(found[d].seconds, found[d].states) for d, _, _ in order]
    assert times == [(s, n) for _, s, n in order]
    assert all(s is not None and n is not None for s, n in times)
    seconds = [float(s or 0.0) for s, _ in times]
    states = [int(n or 0) for _, n in times]
    # states as the driver stored each find: non-decreasing in the order announced; seconds as the
    # walks made them, which a task that ran long may hand in after a later find of a shorter one
    assert states == sorted(states)
    assert all(0 < s <= total_seconds for s in seconds)
    assert states[0] > 0 and states[-1] <= total_states
    for d, rec in found.items():  # confirmed after found, on the same clock
        assert rec.seconds is not None and confirmed[d]["run_seconds"] >= rec.seconds


def test_resume_keeps_earlier_find_times(resumed_run: Resumed) -> None:
    path, before, _ = resumed_run
    assert before["found"], "the first invocation stopped before it found anything"
    with RunStore.open_existing(path) as st:
        found = st.found(0)
    assert {d: (found[d].seconds, found[d].states) for d in before["found"]} == before["found"]
    later = [r for d, r in found.items() if d not in before["found"]]
    assert later  # found by the resumed invocation: its clock and counts go on from the first one's
    assert all((r.seconds or 0.0) >= before["seconds"] and (r.states or 0) >= before["states"] for r in later)


def test_best_at_status_and_curve_read_the_find_times(resumed_run: Resumed) -> None:
    path, _, _ = resumed_run
    with RunStore.open_existing(path) as st:
        found, ranking = st.found(0), st.ranking(0) or []
        data = report_data(st)
        at = {f: best_at(st, "f0", f) for f in (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)}
        total = run_seconds(st.timeline())
    ref = next(r for r in ranking if r.get("reference"))
    speedups = {r["digest"]: ref["estimated_seconds"] / r["estimated_seconds"] for r in ranking if not r["reference"]}
    whole = at[1.0]
    assert whole is not None and whole["speedup"] == pytest.approx(max(speedups.values()))
    assert whole["best_speedup"] == pytest.approx(max(speedups.values()))
    last = 0.0
    for fraction, b in at.items():
        assert b is not None and b["seconds"] == pytest.approx(fraction * b["run_seconds"])
        by_then = [speedups[d] for d, r in found.items() if d in speedups and (r.seconds or 0.0) <= b["seconds"]]
        assert b["speedup"] == (pytest.approx(max(by_then)) if by_then else None)
        assert (b["speedup"] or 0.0) >= last
        last = b["speedup"] or 0.0
    # the report's curve steps at the find times of the ranked μGraphs, to the run's end
    curve = data["best_so_far"]["f0"]
    finds = sorted(float(r.seconds or 0.0) for d, r in found.items() if d in speedups)
    assert [x for x, _ in curve][: len(finds)] == finds
    assert curve[-1][1] == pytest.approx(max(speedups.values()))
    # status says where in the run the fastest μGraph came
    from mugraph.cli.status import status

    out = CliRunner().invoke(status, [str(path)])
    assert out.exit_code == 0, out.output
    top = max(speedups.values())  # of tied μGraphs, the first found: when the run first held the best
    rec = min((found[d] for d in speedups if speedups[d] >= top * (1 - 1e-9)), key=lambda r: (r.seconds, r.states))
    assert rec.seconds is not None and rec.states is not None
    best = min((d for d in speedups if speedups[d] == top), key=[r["digest"] for r in ranking].index)
    what = "best" if ranking[0]["digest"] == best else "fastest μGraph"  # rms_norm keeps the reference first
    share = f"{100 * rec.seconds / total:.0f}%"
    line = f"{what} first found after {rec.seconds:.1f} s of search ({rec.states:,} states; {share} of the run's"
    assert line in out.output
