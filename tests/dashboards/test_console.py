"""The start line: a program of several fragments names each one's preset; a cluster with no worker
is said to have none (the tasks would wait silently otherwise); a count of one is singular."""

from __future__ import annotations

from typing import Any

from mugraph.dashboards.console import NO_WORKERS, reused_line, start_line, verdict_lines
from mugraph.ir.plural import counted, noun


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
