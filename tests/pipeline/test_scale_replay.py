"""The scale replay harness runs: a recorded trace through this tree's driver, a `dask scheduler` process,
`dask worker` processes and a real run store, so the harness behind benchmarks/RESULTS.md "Scale"
cannot rot; and the driver commits results in batches when they come faster than one at a time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_scale import ROOT, replay, summarize, trace_stats
from scale_trace import read_trace

TRACE = ROOT / "benchmarks" / "data" / "scale_rms_norm.jsonl.gz"


def test_the_replay_runs_every_recorded_task_and_finds_the_recorded_mugraphs(tmp_path: Path) -> None:
    header, tasks = read_trace(TRACE)
    assert header["complete"] and header["program"] == "rms_norm"
    stats = trace_stats(tasks)
    row = summarize(replay(TRACE, ROOT, workers=4, scale=0.0, tmp=tmp_path, processes=2), stats, tasks)
    assert row["complete"] and row["tasks"] == len(tasks) == stats["tasks"]
    assert row["same_mugraphs"] and len(row["mugraphs_found"]) == len(stats["digests"]) > 0
    assert row["driver_file"].startswith(str(ROOT / "mugraph"))
    # Tasks that sleep nothing finish in bursts (a task's children are submitted together): the
    # driver commits such a burst in one store write, so it writes fewer times than it runs tasks.
    assert 0 < row["commits"] < row["tasks"], row


@pytest.mark.slow  # every recorded task replayed: about 14 s
def test_the_floor_client_runs_every_recorded_task_without_a_driver(tmp_path: Path) -> None:
    """The floor (Dask alone, children submitted from the trace) runs each recorded task once: a
    client that lost or repeated tasks would make the driver look better or worse than it is."""
    _, tasks = read_trace(TRACE)
    row = summarize(
        replay(TRACE, ROOT, workers=4, scale=0.0, tmp=tmp_path, processes=2, floor=True), trace_stats(tasks), tasks
    )
    assert row["complete"] and row["tasks"] == len(tasks)
    assert row["commits"] == 0 and row["same_mugraphs"] is None  # no store: nothing to compare
