"""The driver's bundling rule on a recorded trace, simulated: how many Dask tasks a run needs and what
the order and bundles cost its wall, for any number of workers, in seconds of one core.

    python benchmarks/bench_bundles.py benchmarks/data/scale_lora_t2.jsonl.gz --workers 2,64,256

A discrete-event simulation of the trace's task tree (bench_scale.py's traces) that calls the
driver's own rules (`task_keys.bundle_size`, `queued_seconds`, `bundle_seconds`, `bundles`, the
depth means of `dispatch.DEPTH_WINDOW` and `dispatch.search_priority`): N worker threads take the
highest-priority bundle queued, run its paths for their recorded seconds and hand back the rest once
a bundle has run twice its seconds; each result reaches the driver after `--latency` / 2, which
spends `--per-path` and `--per-task` seconds on it, serially, and its children are queued `--latency`
/ 2 later. `--rule floor` keeps every bundle at BUNDLE_SECONDS (the rule before bundles grew with the
queue), for the side by side. It measures the rule, not Dask: a replay (bench_scale.py) measures the
real driver and scheduler.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import sys
from collections import Counter
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale_trace import TraceTask, read_trace  # noqa: E402

from mugraph.pipeline.dispatch import DEPTH_WINDOW, search_priority  # noqa: E402
from mugraph.pipeline.task_keys import (  # noqa: E402
    BUNDLE_SECONDS,
    bundle_seconds,
    bundle_size,
    bundles,
    queued_seconds,
)

Key = tuple[str, tuple[int, ...]]
Ready = tuple[int, tuple[Key, ...], float]  # a bundle queued: its priority, its paths, its hand-back seconds
Ran = tuple[tuple[Key, ...], tuple[Key, ...]]  # a bundle run: the paths it ran, the ones it handed back


def simulate(
    tasks: list[TraceTask], workers: int, rule: str, latency: float, per_path: float, per_task: float
) -> tuple[float, int]:
    """(the simulated wall, the Dask tasks run) of the trace on `workers` threads."""
    table = {(t.fragment, tuple(t.path)): t for t in tasks}
    kids = {k: [(k[0], tuple(p)) for p in t.frontier if (k[0], tuple(p)) in table] for k, t in table.items()}
    events: list[tuple[float, int, str, Ready | Ran]] = []
    ready: list[tuple[int, int, tuple[Key, ...], float]] = []
    seq = 0
    means: dict[int, float] = {}
    seen: Counter[int] = Counter()
    queued: Counter[int] = Counter()
    free, driver_free, end, ran_tasks = workers, 0.0, 0.0, 0

    def push(at: float, kind: str, item: Ready | Ran) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, kind, item))
        seq += 1

    def submit(keys: list[Key], at: float) -> None:
        for k in keys:
            queued[len(k[1])] += 1
        waiting = sum(queued.values()) - workers
        size = bundle_size(waiting, workers)
        span = BUNDLE_SECONDS if rule == "floor" else bundle_seconds(queued_seconds(queued, means, workers), workers)
        groups: dict[int, list[Key]] = {}
        for k in keys:
            groups.setdefault(search_priority(k[1]), []).append(k)
        for priority, group in sorted(groups.items(), reverse=True):
            for r in bundles([k[1] for k in group], size, means.get, span):
                push(at + latency / 2, "ready", (priority, tuple(group[i] for i in r), 2 * span))

    submit([k for k in table if not k[1]], 0.0)
    while events:
        now, _, kind, item = heapq.heappop(events)
        if kind == "ready":
            priority, keys, cap = cast(Ready, item)
            heapq.heappush(ready, (-priority, seq, keys, cap))
            seq += 1
        elif kind == "done":
            free += 1
            push(now + latency / 2, "arrive", item)
        else:
            ran, rest = cast(Ran, item)
            driver_free = max(now, driver_free) + per_path * len(ran) + per_task
            for k in ran:
                d = len(k[1])
                seen[d] += 1
                mean = means.get(d, table[k].seconds)
                means[d] = mean + (table[k].seconds - mean) / min(seen[d], DEPTH_WINDOW)
            for k in (*ran, *rest):
                queued[len(k[1])] -= 1
            submit([c for k in ran for c in kids[k]] + list(rest), driver_free)
            end = max(end, driver_free)
        while free and ready:
            _, _, keys, cap = heapq.heappop(ready)
            free -= 1
            ran_tasks += 1
            spent, done = 0.0, []
            for k in keys:
                spent += table[k].seconds
                done.append(k)
                if spent >= cap:
                    break
            push(now + spent, "done", (tuple(done), keys[len(done) :]))
    return end, ran_tasks


def bound(tasks: list[TraceTask], workers: int) -> float:
    """max(task seconds / workers, the longest chain of parent and child tasks)."""
    table = {(t.fragment, tuple(t.path)): t for t in tasks}
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    @functools.cache
    def chain(k: Key) -> float:
        t = table[k]
        return t.seconds + max((chain((k[0], tuple(p))) for p in t.frontier if (k[0], tuple(p)) in table), default=0.0)

    return max(sum(t.seconds for t in tasks) / workers, max(chain(k) for k in table if not k[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--workers", default="2,64,256")
    ap.add_argument("--rule", default="floor,queued", help="floor, queued or both (comma-separated)")
    ap.add_argument("--latency", type=float, default=0.02, help="seconds of one round trip to a worker")
    ap.add_argument("--per-path", type=float, default=0.0002, help="driver seconds per path handled")
    ap.add_argument("--per-task", type=float, default=0.0003, help="driver seconds per Dask task handled")
    args = ap.parse_args()
    print("| trace | N | rule | wall s | bound s | efficiency | Dask tasks |")
    print("|---|---|---|---|---|---|---|")
    for trace in args.traces:
        _, tasks = read_trace(trace)
        for n in (int(x) for x in args.workers.split(",")):
            ideal = bound(tasks, n)
            for rule in args.rule.split(","):
                wall, count = simulate(tasks, n, rule, args.latency, args.per_path, args.per_task)
                print(f"| {trace.name} | {n} | {rule} | {wall:.1f} | {ideal:.1f} | {ideal / wall:.0%} | {count:,} |")


if __name__ == "__main__":
    main()
