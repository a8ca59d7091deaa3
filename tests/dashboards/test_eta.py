"""The size estimate and ETA through the whole pipeline: progress events carry it, `status` prints
it, and the report records the estimate against the actual size of a complete run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from mugraph.dashboards.report import read_report_data, report_path
from mugraph.dashboards.summary import eta_text
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import done, events, mugraph, optimize_args, start


def test_a_whole_run_is_estimated_then_recorded_against_its_size(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    proc = mugraph(*optimize_args("lora", store, "--workers", "2", "--memo-url", "local", budget=300), cwd=tmp_path)
    last = done(proc)
    assert last["complete"]
    progress = [e for e in events(proc) if e["event"] == "progress"]
    sized = [e for e in progress if e.get("estimated_states") is not None]
    assert sized and all(e["estimated_states"] >= e["states"] for e in sized)
    assert all(0 <= e["estimated_fraction"] <= 1 for e in sized)
    with RunStore.open_existing(store) as st:
        final_sample = st.timeline()[-1][-1]
        states = int(st.task_summary()["counters"]["nodes"])
    assert final_sample["estimated_states"] == final_sample["states"] == states  # nothing pending: exact
    assert final_sample["eta_seconds"] == 0.0
    data = read_report_data(report_path(store).read_text())
    size = data["size"]
    assert size is not None and size["complete"] and size["states"] == states and len(size["checkpoints"]) == 4
    for c in size["checkpoints"]:
        assert c["error"] == abs(c["estimated_states"] - states) / states
    text = report_path(store).read_text()
    assert f"search complete: {states:,} states; the size estimate (Knuth probes) was" in text
    assert 'id="chart-size"' in text
    status = mugraph("status", str(store), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert status.returncode == 0 and f"size: {states:,} states, the whole space" in status.stdout


def test_status_of_a_stopped_run_gives_the_estimate_and_eta(tmp_path: Path) -> None:
    """lora's whole default space (12.8 M states, minutes on any machine), interrupted once a progress
    event carries the size (16 tasks finished: about 6 s on a quiet machine, more on a loaded one), as
    a user stops it with Ctrl-C: a narrowed space would finish before that, a fixed wait fall short."""
    store = tmp_path / "run.zarr"
    args = ["optimize", "lora", "--store", str(store), "--budget", "100", "--json", "--dashboard-address", "none"]
    proc = start([*args, "--workers", "1", "--memo-url", "local", "--time-limit", "300"], tmp_path, subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event["event"] == "progress" and event.get("estimated_states") is not None:
                break
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130  # interrupted; what was done is in the store
    with RunStore.open_existing(store) as st:
        sample = st.timeline()[-1][-1]
        states = int(st.task_summary()["counters"]["nodes"])
    assert sample["estimated_states"] is not None and sample["estimated_states"] > states
    status = mugraph("status", str(store), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    line = next(ln for ln in status.stdout.splitlines() if ln.strip().startswith("size:"))
    assert "states," in line and "% done, ETA " in line and "(at this run's rate)" in line


def test_eta_text() -> None:
    assert eta_text(250_000, 1_000_000, 3, 1000.0) == "about 1.0 M states, 25% done, ETA 12 min"
    assert eta_text(5, 5, 0, 0.0) == "about 5 states, 100% done, done"
    assert eta_text(5, 15, 1, 0.0).endswith("ETA unknown")
    assert eta_text(5, None, 1, 10.0) == "not estimated yet"


def test_the_size_beside_a_run_counts_the_tasks_done_since_the_last_sample() -> None:
    """status and report beside a run read the timeline, written every 5-30 s early on: the done tasks'
    states (exact) are ahead of its last sample, and the size says them."""
    from mugraph.dashboards.summary import size_record

    samples = [{"elapsed": 1.0, "states": 6_099, "estimated_states": 5_735_065, "eta_seconds": 900.0}]
    ahead = size_record(samples, False, 76_407)
    assert ahead is not None and ahead["states"] == 76_407 and ahead["estimated_states"] == 5_735_065
    behind = size_record(samples, False, 100)  # a sample is never taken back
    assert behind is not None and behind["states"] == 6_099
    overtaken = size_record(samples, False, 6_000_000)  # an estimate below what is done is raised to it
    assert overtaken is not None and overtaken["estimated_states"] == 6_000_000


def test_a_stopped_runs_rate_weighs_its_invocations_by_their_seconds() -> None:
    """A 20-s resume at a cold start's 5,000 states/s beside 300 s at 30,000: the ETA at the resume's
    rate alone was 6x too long."""
    from mugraph.dashboards.summary import run_rate

    long, short = [{"seconds": 300.0, "states_per_s_searching": 30_000.0}], [{"seconds": 20.0, "states_per_s": 5_000.0}]
    assert run_rate([long, short]) == (300 * 30_000 + 20 * 5_000) / 320
    assert run_rate([[], short, [{"seconds": 4.0, "states_per_s_searching": 0.0}]]) == 5_000.0  # no rate yet: left out
    assert run_rate([]) == 0.0
