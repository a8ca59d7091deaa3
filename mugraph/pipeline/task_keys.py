"""Search tasks' Dask keys, and how many frontier paths one search task carries."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from mugraph.pipeline.plan import FragmentPlan


def task_key(plan: FragmentPlan, path: Iterable[int]) -> str:
    text = f"{plan.payload.digest}|{','.join(map(str, path))}"
    return f"search-{plan.spec.name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def bundle_key(plan: FragmentPlan, paths: Sequence[Sequence[int]]) -> str:
    """A search task's Dask key: its path's key, or for a bundle one naming all its paths (a path is in
    one live bundle at a time, so keys of live tasks never collide)."""
    if len(paths) == 1:
        return task_key(plan, paths[0])
    text = f"{plan.payload.digest}|{';'.join(','.join(map(str, p)) for p in paths)}"
    return f"search-{plan.spec.name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


# Paths one search task carries at most. Each task costs the driver a result message, its share of a
# `gather` and of a `map`, and a release; with 2 workers on lora, 32 instead of 8 took the driver's
# process from 4.4-4.5 to 3.6-3.9 CPU s in 150 s (benchmarks/RESULTS.md, "The driver's CPU on a real
# run"). A bundle that long forms only when 128 paths wait for every worker thread, so many workers
# keep small tasks.
MAX_BUNDLE = 32
BUNDLE_SLACK = 4  # bundle only past this many waiting paths per worker thread
# A bundle holds about this many seconds of expected work (the mean task seconds at each path's
# depth), and a worker hands back the paths of a bundle it has not started once it has spent twice
# that: a bundle serialises its paths, so a long one would delay its siblings' subtrees, and with
# them the run's longest chain of tasks.
BUNDLE_SECONDS = 0.5
# Past that floor a bundle grows with the work queued, up to MAX_BUNDLE_SECONDS: while every worker
# thread has many bundles queued, a longer one delays no chain that matters, and each Dask task costs
# the driver's process about 2 ms of CPU (its submission, the scheduler's report, the gather and the
# release). Simulated on the whole tree-2 traces (Dask's cost aside), a bundle of 1/32 of each thread's
# queue gave lora 1,035 tasks instead of 2,825 on 2 workers and the same walls at 64 and 256 workers
# (90% and 84% of the bound); 1/8 cost lora 5 points at 64 workers.
MAX_BUNDLE_SECONDS = 4.0
BUNDLE_SHARE = 32  # a bundle holds at most 1/32 of the work queued per worker thread


def bundle_size(waiting: int, slots: int) -> int:
    """How many paths a search task carries: one while paths are scarce (each idle worker should get
    its own), up to MAX_BUNDLE when paths wait many times over for every worker thread. Fewer, longer
    tasks cost the scheduler and the driver fewer messages; the nodes visited are the same, since
    each path is explored under its own budget whichever task carries it."""
    return max(1, min(MAX_BUNDLE, waiting // (BUNDLE_SLACK * max(1, slots))))


def queued_seconds(depths: Mapping[int, int], means: Mapping[int, float], slots: int) -> float:
    """The expected seconds of the search rows in flight and not running, given how many rows are in
    flight at each depth and the mean seconds of a task there: scaled by the share of rows no worker
    thread holds. A depth with no mean yet counts nothing (the first tasks, shallow and long, would
    overstate the deep, short rest)."""
    rows = sum(depths.values())
    if rows <= slots:
        return 0.0
    work = sum(n * means.get(d, 0.0) for d, n in depths.items())
    return work * (rows - slots) / rows


def bundle_seconds(queued: float, slots: int) -> float:
    """The expected work one bundle holds, given the expected seconds of the search work queued and
    not running: BUNDLE_SECONDS, or 1/BUNDLE_SHARE of each worker thread's queue if that is longer,
    up to MAX_BUNDLE_SECONDS."""
    return min(MAX_BUNDLE_SECONDS, max(BUNDLE_SECONDS, queued / (BUNDLE_SHARE * max(1, slots))))


def bundles(
    paths: Sequence[Sequence[int]],
    size: int,
    expected: Callable[[int], float | None],
    seconds: float = BUNDLE_SECONDS,
) -> list[range]:
    """Split `paths` (in order) into bundles of at most `size` paths and at most `seconds` of
    expected work each (a path expected to take longer goes alone), given the mean seconds of a task
    at each depth. Where no task of a depth has finished yet (None), `size` alone decides: with
    shallower paths first, a whole level is submitted before any of it finishes, and a worker
    hands a bundle's unstarted paths back once it has spent twice `seconds` on it anyway."""
    out: list[range] = []
    start, work = 0, 0.0
    for i, path in enumerate(paths):
        cost = expected(len(path)) or 0.0
        if i > start and work + cost > seconds:
            out.append(range(start, i))
            start, work = i, 0.0
        work += cost
        if i + 1 - start >= size:
            out.append(range(start, i + 1))
            start, work = i + 1, 0.0
    if start < len(paths):
        out.append(range(start, len(paths)))
    return out
