"""The whole search in one process: budgeted subtree explorations, each frontier resubmitted.

This is the same task protocol the Dask pipeline uses (one `explore(path, budget)` per task), run
serially, depth first: the frontier of each task is pushed so the next task continues where it
stopped. Between tasks the caller gets a progress callback and the time limit is checked, so a
limited run stops cleanly with its remaining frontier.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mugraph.ir.canonical import replaces_find
from mugraph.stages.search.explore import ExploreResult, Found, SearchCounters, Searcher
from mugraph.stages.search.task_paths import Path, task_budget

# States one task expands before handing on its frontier. Each task also pays a fixed cost: its
# path is replayed, a sibling run lists its parent's children again, and the driver, scheduler
# and store handle one result. At 2,000 states that cost was about 13% of lora's worker time
# (2 workers, 150 s: 1.99 M states at 2,000, 2.34 M at 10,000); rms_norm's and gated_mlp's
# whole spaces still make 81 and 171 tasks at 10,000, enough to keep the workers busy.
DEFAULT_BUDGET = 10_000


@dataclass(slots=True)
class SearchReport:
    found: dict[str, Found] = field(default_factory=dict)
    counters: SearchCounters = field(default_factory=SearchCounters)
    frontier: list[Path] = field(default_factory=list)
    tasks: int = 0
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.frontier

    def merge(self, result: ExploreResult) -> None:
        """Add one task's result; of two finds of one μGraph the smaller path is kept, so the
        report does not depend on the order tasks finish in."""
        self.tasks += 1
        self.counters.add(result.counters)
        for digest, f in result.found.items():
            have = self.found.get(digest)
            if replaces_find(f.path, None if have is None else have.path):
                self.found[digest] = f


def run_search(
    searcher: Searcher,
    budget: int = DEFAULT_BUDGET,
    time_limit: float | None = None,
    on_progress: Callable[[SearchReport], None] | None = None,
    start: list[Path] | None = None,
    stop: Callable[[SearchReport], bool] | None = None,
) -> SearchReport:
    """Explore from `start` (default: the root) until the frontier is empty, time is up, or
    `stop(report)` is true after a task (say, once a wanted μGraph is found)."""
    t0 = time.perf_counter()
    report = SearchReport()
    pending: list[Path] = list(reversed(start if start is not None else [()]))
    while pending:
        if time_limit is not None and time.perf_counter() - t0 >= time_limit:
            break
        path = pending.pop()
        result = searcher.explore(path, task_budget(path, budget))
        report.merge(result)
        pending.extend(reversed(result.frontier))
        report.seconds = time.perf_counter() - t0
        if on_progress is not None:
            on_progress(report)
        if stop is not None and stop(report):
            break
    report.frontier = list(reversed(pending))
    report.seconds = time.perf_counter() - t0
    return report
