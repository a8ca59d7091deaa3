"""A finished store read back by `run_optimize`: no cluster and no new invocation in its timeline, and
a `done` event (returned, and sent to `on_event` as a run's is) with the fields of the run's own (a
script reads `.store_bytes`, `.memo.misses` and `.resume` the same way either time; `resume` is None
for a complete run, so a scheduler that resumes on it does not loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mugraph.api import OptimizeOptions, run_optimize
from mugraph.storage.run.store import RunStore
from tests.helpers.narrow import NARROW


def test_a_finished_store_is_read_back_with_the_runs_fields(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    options = OptimizeOptions(
        settings=NARROW["rms_norm"], workers=1, memo_url="local", store=store, dashboard_address=None
    )
    ran: list[Any] = []
    first = run_optimize("rms_norm", options, on_event=ran.append)
    assert first["complete"] and first["resume"] is None and first["tasks_run"] > 0
    assert ran[0]["event"] == "start" and ran[-1] is first  # the run's events end with its `done`
    with RunStore.open_existing(store) as st:
        invocations = len(st.timeline())
    events: list[Any] = []
    again = run_optimize("rms_norm", options, on_event=events.append)
    assert again["tasks_run"] == 0 and events == [again]  # nothing started: no start, history or progress
    with RunStore.open_existing(store) as st:
        assert len(st.timeline()) == invocations
    assert again["best"] == first["best"] and again["mugraphs"] == first["mugraphs"] and again["resume"] is None
    assert set(again) == set(first), set(again) ^ set(first)
    assert set(again["memo"]) == set(first["memo"]) and again["store_bytes"] > 0
