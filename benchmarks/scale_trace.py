"""Recorded search tasks, and the task functions that replay them on simulated workers.

A trace holds one line per search task of a real run: its fragment, path, budget, the seconds it took,
what it found, its frontier, its counters and the size of its pickled result. Replaying it runs the
real driver, scheduler and store against workers whose search function sleeps the recorded seconds
(times a stated scale) and returns the recorded result, so the driver's and the scheduler's cost per
task can be measured at more workers than this machine has cores.

A partial trace (recorded under a time limit) is closed on replay: a recorded frontier path that was
not itself recorded is dropped, so the replay runs exactly the recorded tasks.

This module is imported by the replay's workers, also when the driver under test is an older source
tree, so it imports nothing from `mugraph` at module level.
"""

from __future__ import annotations

import gzip
import json
import pickle
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PathT = tuple[int, ...]


@dataclass(frozen=True)
class TraceTask:
    """One recorded search task."""

    fragment: str  # the fragment's payload digest (what the task function is given)
    path: PathT
    budget: int
    seconds: float
    found: tuple[tuple[str, PathT, str], ...]  # (digest, path, graph JSON)
    frontier: tuple[PathT, ...]
    counters: dict[str, float]
    result_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "fragment": self.fragment,
            "path": list(self.path),
            "budget": self.budget,
            "seconds": round(self.seconds, 6),
            "found": [[d, list(p), g] for d, p, g in self.found],
            "frontier": [list(p) for p in self.frontier],
            "counters": self.counters,
            "result_bytes": self.result_bytes,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TraceTask:
        return cls(
            str(d["fragment"]),
            tuple(d["path"]),
            int(d["budget"]),
            float(d["seconds"]),
            tuple((str(x), tuple(p), str(g)) for x, p, g in d["found"]),
            tuple(tuple(p) for p in d["frontier"]),
            {k: float(v) for k, v in d["counters"].items()},
            int(d["result_bytes"]),
        )


def result_bytes(
    path: PathT, found: tuple[tuple[str, PathT, str], ...], frontier: tuple[PathT, ...], counters: dict[str, float]
) -> int:
    """The size of a task's result as it crosses the wire: its pickled (path, found, frontier, counters)."""
    return len(pickle.dumps((path, found, frontier, counters)))


def write_trace(file: Path, header: dict[str, Any], tasks: Iterable[TraceTask]) -> None:
    """A gzip'd JSON-lines file: the header, then one task a line."""
    with gzip.open(file, "wt", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for t in tasks:
            f.write(json.dumps(t.to_json()) + "\n")


def read_trace(file: Path) -> tuple[dict[str, Any], list[TraceTask]]:
    with gzip.open(file, "rt", encoding="utf-8") as f:
        lines: Iterator[str] = iter(f)
        header = json.loads(next(lines))
        return header, [TraceTask.from_json(json.loads(line)) for line in lines if line.strip()]


_LOADED: dict[str, dict[tuple[str, PathT], TraceTask]] = {}


def _task(trace: str, fragment: str, path: PathT) -> TraceTask:
    """The recorded task (the trace is read once per worker process)."""
    table = _LOADED.get(trace)
    if table is None:
        table = {(t.fragment, t.path): t for t in read_trace(Path(trace))[1]}
        _LOADED[trace] = table
    return table[(fragment, tuple(path))]


def _replay(trace: str, scale: float, fragment: str, path: PathT) -> tuple[TraceTask, tuple[PathT, ...]]:
    t = _task(trace, fragment, path)
    time.sleep(t.seconds * scale)
    table = _LOADED[trace]
    return t, tuple(p for p in t.frontier if (fragment, p) in table)


def replay_dict(trace: str, scale: float, payload: Any, path: PathT, budget: int) -> dict[str, Any]:
    """The search task as drivers up to the batching one call it, returning its dict result."""
    t, frontier = _replay(trace, scale, payload.digest, tuple(path))
    return {
        "path": list(t.path),
        "found": [{"digest": d, "path": list(p), "graph": g} for d, p, g in t.found],
        "frontier": [list(p) for p in frontier],
        "counters": dict(t.counters),
        "memo": {"local_hits": 0, "remote_hits": 0, "misses": 0, "remote_errors": 0},
        "worker": _worker_name(),
        "peak_rss_mib": 0.0,
    }


def replay_record(
    trace: str, scale: float, payload: Any, paths: tuple[PathT, ...], budget: int, seconds: float | None = None
) -> Any:
    """The batching driver's search task: one typed result per path, in order, stopping (as the real
    one does) once the paths replayed have taken `seconds`."""
    from mugraph.pipeline.records import SearchTaskResult
    from mugraph.stages.search.explore import Found

    out: list[Any] = []
    t0 = time.perf_counter()
    for path in paths:
        if out and seconds is not None and time.perf_counter() - t0 >= seconds:
            break
        t, frontier = _replay(trace, scale, payload.digest, tuple(path))
        out.append(
            SearchTaskResult(
                path=t.path,
                found=tuple(Found(d, p, g) for d, p, g in t.found),
                frontier=frontier,
                counters=dict(t.counters),
                memo={},
                worker=_worker_name(),
                peak_rss_mib=0.0,
            )
        )
    return tuple(out)


def floor_task(trace: str, scale: float, fragment: str, path: PathT) -> None:
    """bench_scale's floor: sleep the recorded seconds and return nothing (the client knows the children)."""
    _replay(trace, scale, fragment, tuple(path))


def replay_confirm(payload: Any, digest: str, graph: str) -> dict[str, Any]:
    """The confirm task of a replay: answers at once, "not equivalent", so no layout task follows and
    the replay measures the search path alone (confirmations are one task per μGraph found, not per
    search task, and a real one is real work this machine's two cores would be measuring instead)."""
    return {"digest": digest, "equivalent": False, "error": "replayed", "worker": _worker_name()}


def replay_warm(payload: Any, confirming: bool) -> str:
    """The warm-up task of a replay: nothing to build, since the search is replayed."""
    return _worker_name()


def _worker_name() -> str:
    from distributed import get_worker

    try:
        return str(get_worker().name)
    except ValueError:
        return "local"
