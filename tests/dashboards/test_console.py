"""The start line: a program of several fragments names each one's preset; a cluster with no worker
is said to have none (the tasks would wait silently otherwise); a count of one is singular."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mugraph.dashboards.console import NO_PROGRESS, NO_WORKERS, limit_line, reused_line, start_line, verdict_lines
from mugraph.ir.plural import counted, noun
from mugraph.run.kernels import kernels_check_command


def _start(fragments: list[str], presets: dict[str, str], workers: int) -> dict[str, Any]:
    return {
        "resumed": False,
        "program": "p",
        "store": "runs/p.zarr",
        "fragments": fragments,
        "presets": presets,
        "tasks_done": 0,
        "tasks_pending": len(fragments),
        "workers": workers,
        "dashboard": "http://127.0.0.1:8787/status",
    }


def test_several_fragments_are_named_with_their_presets() -> None:
    line = start_line(_start(["f0", "f1", "f2"], {"f0": "mlp", "f1": "attention", "f2": "mlp"}, 2))
    assert "3 fragments (f0 mlp, f1 attention, f2 mlp), 0 tasks done, 3 pending; 2 workers;" in line
    assert NO_WORKERS not in line
    one = start_line(_start(["f0"], {"f0": "lora"}, 1) | {"tasks_done": 1})
    assert "1 fragment, 1 task done, 1 pending; 1 worker;" in one


def test_no_worker_is_said() -> None:
    line = start_line(_start(["f0"], {"f0": "lora"}, 0))
    first, second = line.split("\n")
    assert "0 workers" in first and second.startswith("mugraph: the scheduler has no workers yet")


def test_counts_of_one_are_singular() -> None:
    assert [counted(n, "worker") for n in (0, 1, 2, 1234)] == ["0 workers", "1 worker", "2 workers", "1,234 workers"]
    assert counted(1, "query", "queries") == "1 query" and counted(3, "query", "queries") == "3 queries"
    assert noun(1, "was", "were") == "was" and noun(2, "was", "were") == "were"
    assert "(1 fragment, 1 task done)" in reused_line("p", "runs/p.zarr", 1, 1)


def test_the_verdict_counts_one_task_and_one_kernel_in_the_singular() -> None:
    ref = {"digest": "r" * 64, "reference": True, "kernels": 1, "estimated_seconds": 2e-5, "speedup": 1.0}
    done = {
        "program": "p",
        "complete": True,
        "tasks_run": 1,
        "tasks_done": 1,
        "states": 1,
        "solver_calls": 1,
        "mugraphs": ["m" * 64],
        "seconds": 1.0,
        "ranking": {"f0": [ref]},
        "reference": {"f0": ref},
        "best_per_fragment": {"f0": ref["digest"]},
        "store": "runs/p.zarr",
        "report": "runs/p.report.html",
    }
    first, f0 = verdict_lines(done, "H100")[:2]
    assert "1 confirmed μGraph, 1 task this run, 1 state, 1 solver call," in first
    assert "best is the reference itself, 1 kernel," in f0 and "(1 μGraph ranked)" in f0


def _stopped(tasks_run: int, store: str = "runs/p.zarr") -> dict[str, Any]:
    ref = {"digest": "r" * 64, "reference": True, "kernels": 1, "estimated_seconds": 2e-5, "speedup": 1.0}
    return {
        "program": "p",
        "complete": False,
        "tasks_run": tasks_run,
        "tasks_done": tasks_run,
        "tasks_pending": 7,
        "states": 0,
        "solver_calls": 0,
        "mugraphs": [],
        "seconds": 42.0,
        "ranking": {"f0": [ref]},
        "reference": {"f0": ref},
        "best_per_fragment": {"f0": ref["digest"]},
        "store": store,
        "report": "runs/p.report.html",
        "kernels": "runs/p.kernels.py",
        "kernels_check": kernels_check_command(Path(store), ("optimize", "p")),
    }


def test_a_run_that_made_no_progress_before_its_limit_says_a_longer_limit_is_needed() -> None:
    """Resuming with the same limit would do no task either: the verdict says so, not only "resume"."""
    assert NO_PROGRESS in verdict_lines(_stopped(0), "H100")
    assert NO_PROGRESS not in verdict_lines(_stopped(3), "H100")
    assert "longer --time-limit" in NO_PROGRESS


def test_the_verdict_quotes_the_store_in_the_commands_it_names() -> None:
    lines = verdict_lines(_stopped(1, "mo ved ü/p.zarr"), "H100")
    assert "  store: mo ved ü/p.zarr  (mugraph show 'mo ved ü/p.zarr')" in lines
    assert any("mugraph emit 'mo ved ü/p.zarr' --check" in line for line in lines)


def test_the_limit_line_says_what_is_cancelled_and_how_long_confirming_may_take() -> None:
    e = {"event": "limit", "time_limit": 20.0, "cancelled": 4, "checks": 3, "drain_seconds": 10.0}
    line = limit_line(e)
    assert line.startswith("mugraph: time limit reached (20 s): search stopped, 4 running or queued search tasks")
    assert "4 running or queued search tasks stopped (what those running had found is kept;" in line
    assert "3 checks left, up to 10 s more" in line
    assert "ranking what was confirmed" in limit_line(e | {"checks": 0, "cancelled": 1})


def test_the_progress_line_stops_at_the_limit_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The search has stopped at the limit: a progress sample after it (the last one, taken while what
    was found is confirmed) would print one more `tasks … running …` line under the limit's line."""
    from mugraph.run.outcome import Console

    progress = {
        "event": "progress",
        **dict.fromkeys(("tasks_done", "tasks_running", "tasks_pending", "states", "mugraphs", "confirmed"), 1),
        **{"states_per_s": 1.0, "solver_calls": 0, "seconds": 20.0},
    }
    console = Console(verbose=True)
    console.event(progress)
    console.event({"event": "limit", "time_limit": 20.0, "cancelled": 4, "checks": 3, "drain_seconds": 10.0})
    console.event(progress | {"seconds": 21.0})
    console.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("tasks 1 done") and "time limit reached" in lines[1], lines


def test_a_verdict_without_a_report_names_none() -> None:
    """A finished store read back from a read-only place has no report beside it and writes none."""
    assert "  report: runs/p.report.html" in verdict_lines(_stopped(1), "H100")
    lines = verdict_lines({**_stopped(1), "report": None}, "H100")
    assert not any(line.startswith("  report:") for line in lines)
