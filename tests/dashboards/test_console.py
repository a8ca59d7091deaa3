"""The start line: a program of several fragments names each one's preset; a cluster with no worker
is said to have none (the tasks would wait silently otherwise)."""

from __future__ import annotations

from typing import Any

from mugraph.dashboards.console import NO_WORKERS, start_line


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
    assert "3 fragment(s) (f0 mlp, f1 attention, f2 mlp), 0 tasks done" in line and NO_WORKERS not in line
    one = start_line(_start(["f0"], {"f0": "lora"}, 2))
    assert "1 fragment(s), 0 tasks done" in one


def test_no_worker_is_said() -> None:
    line = start_line(_start(["f0"], {"f0": "lora"}, 0))
    first, second = line.split("\n")
    assert "0 workers" in first and second.startswith("mugraph: the scheduler has no workers yet")
