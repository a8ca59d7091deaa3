"""How the driver cuts a batch of frontier paths into search tasks, as pure functions of what it knows
(the paths, the work queued, each depth's recent task seconds), so that the driver and the bundling
simulator (benchmarks/bench_bundles.py) run the same rule.

A bundle is one Dask task carrying several paths, each explored under its own budget, so bundling
changes how many tasks the scheduler and the driver handle, never which nodes are visited. Paths are
grouped by depth (a depth's tasks take like times), except the *small* ones, which travel together
whatever their depth; a task runs at the priority of its first path, the best of its bundle (a
path's rank where the driver knows it, `rank_priority`, else shallower first, `search_priority`):
- a path whose depth's recent tasks took a small share of a bundle's seconds (by their median: a
  depth's mean is held up by a few long subtrees);
- a path of a depth with no finished task yet, while many paths wait for every worker thread (then
  the order between depths costs the wall little: every thread has work queued either way). Such a
  path is priced at 1/`bundle_size` of a bundle, so a level no task has finished goes that many
  paths to a bundle and reaches every thread.
A budgeted task's frontier holds a few paths at each of many depths, so grouped by depth alone the
deep ones went one or two a task: on 2 workers lora's whole tree made 1,361 Dask tasks for 9,552
paths and gqa's 12,865 for 31,799 (simulated; each task costs the driver's process a few ms of CPU).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "BUNDLE_SECONDS",
    "DEFAULT_RULE",
    "DEPTH_WINDOW",
    "MAX_BUNDLE",
    "BundlePlan",
    "BundleRule",
    "DepthTimes",
    "bundle_seconds",
    "bundle_size",
    "bundles",
    "plan_bundles",
    "queued_seconds",
    "rank_priority",
    "search_priority",
]

DEPTH_WINDOW = 20  # tasks in each depth's moving mean and median of task seconds
# A path is small when its depth's median task takes at most 1/SMALL_SHARE of a bundle's seconds.
SMALL_SHARE = 4


def search_priority(path: Sequence[int]) -> int:
    """A search task's Dask priority (higher runs first) where its rank is unknown (a replayed trace):
    shallower paths first."""
    return -len(path)


RANK_FLOOR = -(1 << 19)  # the lowest rank priority: above the workers' warm-up tasks (dispatch)


def rank_priority(rank: int) -> int:
    """A search task's Dask priority from its rank (`stages.search.task_paths`): the paths that stray
    least from the search order's first choices first, so the early part of a run holds the
    children the cost order puts first at every level, not every shallow subtree."""
    return max(-rank, RANK_FLOOR)


# Paths one search task carries at most. Each task costs the driver a result message, its share of a
# `gather` and of a `map`, and a release; with 2 workers on lora, 32 instead of 8 took the driver's
# process from 4.4-4.5 to 3.6-3.9 CPU s in 150 s (benchmarks/RESULTS.md, "The driver's CPU on a real
# run"). Simulated, 64 (with MAX_BUNDLE_SECONDS 8) took lora's whole tree on 2 workers from 747 to
# 467 tasks once small paths travelled together. A depth-grouped bundle that long forms only when 256
# paths wait for every worker thread, so many workers keep small tasks.
MAX_BUNDLE = 64
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
# (90% and 84% of the bound); 1/8 cost lora 5 points at 64 workers. The cap of 8 s (from 4) matters
# only while a thread's queue holds over 256 s of work, as on 2 workers.
MAX_BUNDLE_SECONDS = 8.0
BUNDLE_SHARE = 32  # a bundle holds at most 1/32 of the work queued per worker thread


def bundle_size(waiting: int, slots: int, cap: int = MAX_BUNDLE) -> int:
    """How many paths a search task carries: one while paths are scarce (each idle worker should get
    its own), up to MAX_BUNDLE when paths wait many times over for every worker thread. Fewer, longer
    tasks cost the scheduler and the driver fewer messages; the nodes visited are the same, since
    each path is explored under its own budget whichever task carries it."""
    return max(1, min(cap, waiting // (BUNDLE_SLACK * max(1, slots))))


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


def bundle_seconds(queued: float, slots: int, cap: float = MAX_BUNDLE_SECONDS) -> float:
    """The expected work one bundle holds, given the expected seconds of the search work queued and
    not running: BUNDLE_SECONDS, or 1/BUNDLE_SHARE of each worker thread's queue if that is longer,
    up to MAX_BUNDLE_SECONDS."""
    return min(cap, max(BUNDLE_SECONDS, queued / (BUNDLE_SHARE * max(1, slots))))


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


class DepthTimes:
    """Each depth's recent search-task seconds: a mean (of the first DEPTH_WINDOW, then a moving one),
    which prices a path's expected work, and the median of the last DEPTH_WINDOW, which says whether
    its typical task is small."""

    def __init__(self) -> None:
        self.means: dict[int, float] = {}
        self.tasks: Counter[int] = Counter()
        self._recent: dict[int, deque[float]] = {}
        self._medians: dict[int, float] = {}  # cached until the depth's next task

    def observe(self, depth: int, seconds: float) -> None:
        self.tasks[depth] += 1
        mean = self.means.get(depth, seconds)
        self.means[depth] = mean + (seconds - mean) / min(self.tasks[depth], DEPTH_WINDOW)
        self._recent.setdefault(depth, deque(maxlen=DEPTH_WINDOW)).append(seconds)
        self._medians.pop(depth, None)

    def median(self, depth: int) -> float | None:
        if depth not in self._medians:
            recent = self._recent.get(depth)
            if not recent:
                return None
            self._medians[depth] = sorted(recent)[len(recent) // 2]
        return self._medians[depth]


@dataclass(frozen=True)
class BundleRule:
    """The rule's settings: `small_share` (None: every path bundled with its own depth only, as before
    small paths travelled together) and the caps on a bundle's paths and seconds. Other values than
    the defaults exist for side-by-side simulations."""

    small_share: int | None = SMALL_SHARE
    max_paths: int = MAX_BUNDLE
    max_seconds: float = MAX_BUNDLE_SECONDS


DEFAULT_RULE = BundleRule()


@dataclass(frozen=True)
class BundlePlan:
    """A batch's search tasks: the seconds a bundle holds (a worker hands back the unstarted paths of
    a bundle once it has spent twice that), and each task's priority and positions in the batch."""

    seconds: float
    tasks: tuple[tuple[int, tuple[int, ...]], ...]


def plan_bundles(
    paths: Sequence[Sequence[int]],
    queued: Mapping[int, int],
    times: DepthTimes,
    slots: int,
    rule: BundleRule = DEFAULT_RULE,
    priorities: Sequence[int] | None = None,
) -> BundlePlan:
    """Cut a batch of `paths` into search tasks, given the search rows in flight per depth (`queued`,
    the batch included) and the worker threads (`slots`). The small paths (see the module's
    docstring) form bundles of their own, up to the rule's paths and the bundle's seconds; the rest
    are bundled per depth, also by count (`bundle_size`) while few paths wait. A task runs at the
    priority of its first path: each path's in `priorities` where given (paths then go to bundles
    highest first, so a bundle holds paths of like priority), else its depth's (`search_priority`;
    paths keep the batch's order within a task)."""
    waiting = sum(queued.values()) - slots
    span = bundle_seconds(queued_seconds(queued, times.means, slots), slots, rule.max_seconds)
    size = bundle_size(waiting, slots, rule.max_paths)
    small_share = rule.small_share
    small: list[int] = []
    by_depth: dict[int, list[int]] = {}
    for i, path in enumerate(paths):
        typical = times.median(len(path))
        if small_share is not None and (size > 1 if typical is None else typical <= span / small_share):
            small.append(i)
        else:
            by_depth.setdefault(search_priority(path), []).append(i)
    priority = [search_priority(path) for path in paths] if priorities is None else list(priorities)
    small.sort(key=priority.__getitem__, reverse=True)  # highest first; stable: the batch's order among equals
    tasks: list[tuple[int, tuple[int, ...]]] = []
    for _, group in sorted(by_depth.items(), reverse=True):
        group.sort(key=priority.__getitem__, reverse=True)
        for r in bundles([paths[i] for i in group], size, times.means.get, span):
            tasks.append((priority[group[r.start]], tuple(group[j] for j in r)))

    # A depth with no finished task yet is priced at 1/size of a bundle, so its paths go `size` to a
    # bundle: priced at nothing, a whole level would go in one bundle, which one worker thread runs
    # while the others wait for its hand-back.
    def price(depth: int) -> float:
        mean = times.means.get(depth)
        return span / size if mean is None else mean

    for r in bundles([paths[i] for i in small], rule.max_paths, price, span):
        tasks.append((priority[small[r.start]], tuple(small[j] for j in r)))
    return BundlePlan(span, tuple(tasks))
