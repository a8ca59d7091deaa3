"""The driver's bundling rule on a recorded trace, simulated: how many Dask tasks a run needs and what
the order and bundles cost its wall, for any number of workers, in seconds of one core.

    python benchmarks/bench_bundles.py benchmarks/data/scale_lora_t2.jsonl.gz --workers 2,64,256

A discrete-event simulation of the trace's task tree (bench_scale.py's traces) that cuts each batch
into tasks with the driver's own `bundling.plan_bundles` and its `DepthTimes`: N worker threads take
the highest-priority bundle queued, run its paths for their recorded seconds and hand back the rest
once a bundle has run twice its seconds. Each result reaches the driver `--latency` / 2 after it
finishes; the driver spends `--per-path` and `--per-task` seconds on it, one result at a time, and
its children are queued `--latency` / 2 later. Every task passes the scheduler twice (to a worker and
back), which handles one message at a time in `--scheduler` seconds: the default, 0.8 ms, puts
gqa's whole tree at 256 workers with one path a task at 41% of the bound, where Dask alone
(`bench_scale.py --driver floor`) measured 42% on a 16-core machine. That match was a coincidence of
the harness: replayed there, the loss at 256 workers followed the number of processes simulating
the workers (41% on 6, 44-47% on 12, 62-64% on 24), and fewer tasks did not shorten the wall
(benchmarks/RESULTS.md, "Scale"). So the task counts here are the rule's, and the walls at many
workers a model, not a prediction. `--rule depth` bundles every path with its own depth only (the
rule before small paths travelled together), for the side by side. A replay (bench_scale.py)
measures the real driver and scheduler.
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

from mugraph.pipeline.bundling import DEFAULT_RULE, BundleRule, DepthTimes, plan_bundles  # noqa: E402

Key = tuple[str, tuple[int, ...]]
Ready = tuple[int, tuple[Key, ...], float]  # a bundle queued: its priority, its paths, its hand-back seconds
# the rules compared: `base` is the rule before small paths travelled together (by depth only, at most
# 32 paths and 4 s a bundle); `depth` the same with today's caps; `mixed` today's
RULES: dict[str, BundleRule] = {
    "base": BundleRule(None, 32, 4.0),
    "depth": BundleRule(None),
    "mixed": DEFAULT_RULE,
}
Ran = tuple[tuple[Key, ...], tuple[Key, ...]]  # a bundle run: the paths it ran, the ones it handed back


def simulate(
    tasks: list[TraceTask],
    workers: int,
    rule: str,
    latency: float,
    per_path: float,
    per_task: float,
    scheduler: float = 0.0,
) -> tuple[float, int]:
    """(the simulated wall, the Dask tasks run) of the trace on `workers` threads."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}: one of {', '.join(RULES)}")
    table = {(t.fragment, tuple(t.path)): t for t in tasks}
    kids = {k: [(k[0], tuple(p)) for p in t.frontier if (k[0], tuple(p)) in table] for k, t in table.items()}
    events: list[tuple[float, int, str, Ready | Ran]] = []
    ready: list[tuple[int, int, tuple[Key, ...], float]] = []
    seq = 0
    times = DepthTimes()
    queued: Counter[int] = Counter()
    free, driver_free, scheduler_free, end, ran_tasks = workers, 0.0, 0.0, 0.0, 0

    def push(at: float, kind: str, item: Ready | Ran) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, kind, item))
        seq += 1

    def through_scheduler(at: float) -> float:
        """When a message reaching the scheduler at `at` has been handled (one at a time)."""
        nonlocal scheduler_free
        scheduler_free = max(at, scheduler_free) + scheduler
        return scheduler_free

    def submit(keys: list[Key], at: float) -> None:
        for k in keys:
            queued[len(k[1])] += 1
        plan = plan_bundles([k[1] for k in keys], queued, times, workers, RULES[rule])
        for priority, members in plan.tasks:
            bundle = tuple(keys[i] for i in members)
            push(through_scheduler(at + latency / 2), "ready", (priority, bundle, 2 * plan.seconds))

    submit([k for k in table if not k[1]], 0.0)
    while events:
        now, _, kind, item = heapq.heappop(events)
        if kind == "ready":
            priority, keys, cap = cast(Ready, item)
            heapq.heappush(ready, (-priority, seq, keys, cap))
            seq += 1
        elif kind == "done":
            free += 1
            push(through_scheduler(now + latency / 2), "arrive", item)
        else:
            ran, rest = cast(Ran, item)
            driver_free = max(now, driver_free) + per_path * len(ran) + per_task
            for k in ran:
                times.observe(len(k[1]), table[k].seconds)
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
    ap.add_argument("--rule", default="base,mixed", help="base, depth, mixed (comma-separated)")
    ap.add_argument("--latency", type=float, default=0.02, help="seconds of one round trip to a worker")
    ap.add_argument("--per-path", type=float, default=0.0002, help="driver seconds per path handled")
    ap.add_argument("--per-task", type=float, default=0.0003, help="driver seconds per Dask task handled")
    ap.add_argument(
        "--scheduler",
        type=float,
        default=0.0008,
        help="scheduler seconds per message (a task costs two: to a worker and back), one at a time",
    )
    args = ap.parse_args()
    print("| trace | N | rule | wall s | bound s | efficiency | Dask tasks |")
    print("|---|---|---|---|---|---|---|")
    for trace in args.traces:
        _, tasks = read_trace(trace)
        for n in (int(x) for x in args.workers.split(",")):
            ideal = bound(tasks, n)
            for rule in args.rule.split(","):
                wall, count = simulate(tasks, n, rule, args.latency, args.per_path, args.per_task, args.scheduler)
                print(f"| {trace.name} | {n} | {rule} | {wall:.1f} | {ideal:.1f} | {ideal / wall:.0%} | {count:,} |")


if __name__ == "__main__":
    main()
