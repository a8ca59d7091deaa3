"""Every event a real run emits, and every record it stores, has exactly the keys of its record type:
a key the driver adds, renames or drops without its TypedDict (or the reverse) fails here, before a
reader indexes a key that is not there."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from mugraph.pipeline import events
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.run_records import (
    ConfirmationRecord,
    FinalRecord,
    FragmentRecord,
    LayoutRecord,
    ProgressSample,
)
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import events as run_events
from tests.helpers.cli_runs import mugraph, optimize_args

RECORDS: dict[str, Any] = {
    "start": events.StartEvent,
    "history": events.HistoryEvent,
    "progress": events.ProgressEvent,
    "found": events.FoundEvent,
    "confirmed": events.ConfirmedEvent,
    "layout": events.LayoutEvent,
    "limit": events.LimitEvent,
    "measured": events.MeasuredEvent,
    "done": events.DoneEvent,
}

Runs = tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]  # the store, the first run's events, the resume's


def misfit(record: Any, keys: Iterable[str]) -> frozenset[str]:
    """The keys by which `keys` differs from the record type's: required ones missing, unknown ones."""
    have = frozenset(keys)
    required: frozenset[str] = record.__required_keys__
    optional: frozenset[str] = record.__optional_keys__
    return (required - have) | (have - required - optional)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """rms_norm narrowed, run to the end, then run again on its store (a resume, not a read-back;
    `--json` prints every event but `history`, whose samples the store's timeline holds)."""
    cwd = tmp_path_factory.mktemp("events")
    store = cwd / "run.zarr"
    args = optimize_args("rms_norm", store, "--workers", "1")
    first = run_events(mugraph(*args, cwd=cwd))
    # --profile asks for what only a run does: a finished store is then resumed, not read back
    again = run_events(mugraph(*args, "--profile", str(cwd / "p.html"), cwd=cwd))
    return store, first, again


def test_every_event_has_the_keys_of_its_record(two_runs: Runs) -> None:
    _, first, again = two_runs
    kinds = [e["event"] for e in first]
    assert {"start", "progress", "found", "confirmed", "layout", "done"} <= set(kinds), kinds
    assert again[0]["event"] == "start" and again[0]["resumed"]
    for e in first + again:
        assert not misfit(RECORDS[e["event"]], e), (e["event"], misfit(RECORDS[e["event"]], e))
    for e in first + again:
        if e["event"] == "done":
            assert all(not misfit(RankedRow, r) for rows in e["ranking"].values() for r in rows)
            assert all(not misfit(RankedRow, r) for r in e["reference"].values())


def test_every_stored_record_has_the_keys_of_its_record(two_runs: Runs) -> None:
    store, *_ = two_runs
    with RunStore.open_existing(store) as st:
        fragments = st.fragments()
        assert fragments and all(not misfit(FragmentRecord, f) for f in fragments)
        confirmations = st.confirmations(0)
        assert confirmations and all(not misfit(ConfirmationRecord, c) for c in confirmations.values())
        layouts = st.layouts(0)
        assert layouts and all(not misfit(LayoutRecord, r) for r in layouts.values())
        assert all(d == r["digest"] for d, r in [*confirmations.items(), *layouts.items()])
        samples = [s for inv in st.timeline() for s in inv]
        assert len(st.timeline()) == 2 and all(not misfit(ProgressSample, s) for s in samples)
        final = st.final()
        assert final is not None and not misfit(FinalRecord, final)


def test_a_finished_run_s_last_progress_has_nothing_running_or_pending(two_runs: Runs) -> None:
    _, first, _ = two_runs
    last = [e for e in first if e["event"] == "progress"][-1]
    assert last["tasks_done"] > 1
    assert last["tasks_running"] == last["tasks_pending"] == 0, last
