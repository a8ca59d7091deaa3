"""Typed records on the search path: what a search task returns to the driver, per path it explored.

A search task may carry several paths (a bundle); it returns one `SearchTaskResult` per path, in
order, so the driver commits each path's row exactly as if it had run alone. Counters are the stage's
`SearchCounters.as_dict()`, summed generically, so a counter the stage adds flows to the store and the
progress events without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from mugraph.stages.search.explore import Found

__all__ = ["MEMO_KEYS", "Found", "SearchTaskResult", "finds_only"]

Path = tuple[int, ...]
MEMO_KEYS = ("local_hits", "remote_hits", "misses", "remote_errors")


@dataclass(frozen=True, slots=True)
class SearchTaskResult:
    """One explored path: the μGraphs found under it, its unexplored frontier, its counters, the memo
    lookups it made by level, the worker that ran it (with that worker's peak memory), the probed
    size estimates of its frontier paths (None where a path was not probed), and why the worker's
    shared memo failed, if it has (the driver says so: a worker's log may be read by no one)."""

    path: Path
    found: tuple[Found, ...]
    frontier: tuple[Path, ...]
    counters: Mapping[str, float]
    memo: Mapping[str, int] = field(default_factory=dict)
    worker: str = ""
    peak_rss_mib: float = 0.0
    frontier_estimates: tuple[float | None, ...] | None = None  # Knuth-probe sizes, per frontier path
    frontier_ranks: tuple[int, ...] | None = None  # per frontier path, below `path` (`task_paths`)
    memo_error: str | None = None  # why the worker's shared memo failed, once it has (None while it works)
    found_at: tuple[float, ...] | None = None  # per found μGraph, the wall-clock time its walk found it
    # Stopped at the run's time limit: its finds so far and no frontier. The driver stores the finds
    # and leaves the task pending, to run again whole when the run is resumed.
    cut: bool = False

    @property
    def seconds(self) -> float:
        return float(self.counters.get("seconds", 0.0))


def finds_only(result: SearchTaskResult) -> SearchTaskResult:
    """`result` as one handled past the run's time limit: its finds kept, its task left pending
    (cut, without a frontier), as if cut at the limit; the resumed run explores the task again."""
    return replace(result, frontier=(), frontier_estimates=(), frontier_ranks=(), cut=True)
