"""How far one driver scales: record a run's search tasks once, then replay them through the real
driver, a real Dask scheduler in its own process and the real run store, with N simulated workers.

    python benchmarks/bench_scale.py record rms_norm --out benchmarks/data/scale_rms_norm.jsonl.gz
    python benchmarks/bench_scale.py record lora --time-limit 300 --out benchmarks/data/scale_lora.jsonl.gz
    python benchmarks/bench_scale.py from-store runs/gqa.zarr --out benchmarks/data/scale_gqa.jsonl.gz
    python benchmarks/bench_scale.py replay benchmarks/data/scale_lora.jsonl.gz --workers 2,8,32 \\
        --driver old=main --driver new=. [--scale 1.0] [--json rows.jsonl]

`record` runs the program's search tasks one after another in this process (the task tree of a run;
breadth first, so a time-limited trace is the top of the tree) with the search function a worker
runs, and writes each task's path, budget, seconds, found μGraphs, frontier, counters and result size.
`from-store` makes the same trace from the store of a real `mugraph optimize` run (any workers, any
machine, finished or stopped; see store_trace.py): its done tasks, each with the seconds it took there.

`replay` starts, per driver and per N: a `dask scheduler` process, `dask worker` processes with N
threads in all (a thread is a simulated worker: the replayed task only sleeps), and a driver process
running `Driver.run()` of the given source tree on a fresh run store, with the search task replaced
by one that sleeps the recorded seconds times `--scale` and returns the recorded result (frontier
paths not in the trace dropped), and the confirm task by one that answers "not equivalent" at once
(so no layout task runs and the replay measures the search path), and the warm-up task by one that
builds nothing. Everything else is the real pipeline. Per run: wall, ideal (the lower bound no
replay can beat: the trace's task seconds over N, or its critical path if longer), efficiency (ideal
over wall), the list schedule (the trace's wall on N slots in the driver's order, shallower paths
first, with a driver and scheduler that cost nothing: `list_wall`), driver CPU,
scheduler CPU, tasks/s, store commits and the seconds inside them, peak driver memory, and whether
the μGraph set is the recorded one. A driver given as a git revision is exported from this repository.
`--driver floor` replays the trace through Dask alone (`FLOOR_SCRIPT`): the floor under any driver.
"""

from __future__ import annotations

import argparse
import collections
import heapq
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale_trace import TraceTask, read_trace, result_bytes, write_trace  # noqa: E402
from tree_path import tree_path  # noqa: E402

# ---------------------------------------------------------------------------------------------- record


def record(
    program: str, budget: int, time_limit: float | None, settings: dict[str, Any]
) -> tuple[dict[str, Any], list[TraceTask]]:
    """The search tasks of `program`, run here one after another, breadth first."""
    from mugraph.pipeline.plan import make_plan
    from mugraph.pipeline.worker import _state
    from mugraph.programs.registry import get_builtin
    from mugraph.stages.search.config import SearchConfig
    from mugraph.stages.search.task_paths import task_budget

    # named, so a replay on a later tree knows them
    settings = {"oracle": SearchConfig().oracle, "order": SearchConfig().order, **settings}
    plan = make_plan(get_builtin(program), None, settings, budget)
    state = _state()
    queue: collections.deque[tuple[int, tuple[int, ...]]] = collections.deque(
        (i, ()) for i in range(len(plan.fragments))
    )
    tasks: list[TraceTask] = []
    t0 = time.perf_counter()
    complete = True
    while queue:
        if time_limit is not None and time.perf_counter() - t0 >= time_limit:
            complete = False
            break
        i, path = queue.popleft()
        payload = plan.fragments[i].payload
        b = task_budget(path, budget)
        s0 = time.perf_counter()
        res = state.searcher(payload).explore(path, b)
        seconds = time.perf_counter() - s0
        found = tuple((f.digest, tuple(f.path), f.graph) for f in res.found.values())
        frontier = tuple(tuple(p) for p in res.frontier)
        counters = {k: float(v) for k, v in res.counters.as_dict().items()}
        size = result_bytes(res.path, found, frontier, counters)
        tasks.append(TraceTask(payload.digest, tuple(path), b, seconds, found, frontier, counters, size))
        queue.extend((i, p) for p in frontier)
    header = {
        "program": program,
        "budget": budget,
        "settings": settings,
        "complete": complete,
        "time_limit": time_limit,
        "unrun_frontier": len(queue),
        "record_seconds": time.perf_counter() - t0,
        "fragments": [fp.payload.digest for fp in plan.fragments],
    }
    return header, tasks


# ---------------------------------------------------------------------------------------------- replay


def trace_stats(tasks: list[TraceTask]) -> dict[str, Any]:
    """Tasks, task seconds, and the critical path (the longest chain of parent → child seconds)."""
    by_key = {(t.fragment, t.path): t for t in tasks}
    longest: dict[tuple[str, tuple[int, ...]], float] = {}

    # A child's path is not always longer than its parent's (a sibling run): walk down from the roots.
    def chain(key: tuple[str, tuple[int, ...]]) -> float:
        stack = [(key, False)]
        while stack:
            k, expanded = stack.pop()
            if k in longest:
                continue
            t = by_key[k]
            kids = [(t.fragment, p) for p in t.frontier if (t.fragment, p) in by_key]
            if expanded:
                longest[k] = t.seconds + max((longest[c] for c in kids), default=0.0)
            else:
                stack.append((k, True))
                stack.extend((c, False) for c in kids if c not in longest)
        return longest[key]

    roots = [(t.fragment, t.path) for t in tasks if not t.path]
    return {
        "tasks": len(tasks),
        "task_seconds": sum(t.seconds for t in tasks),
        "critical_path": max((chain(r) for r in roots), default=0.0),
        "result_bytes": sum(t.result_bytes for t in tasks),
        "digests": sorted({d for t in tasks for d, _, _ in t.found}),
    }


DRIVER_SCRIPT = r"""
import functools, json, resource, sys, time
from pathlib import Path
import psutil
from distributed import Client
import scale_trace
from mugraph.pipeline import driver as drv
from mugraph.pipeline.plan import make_plan
from mugraph.programs.registry import get_builtin
try:
    from mugraph.storage.run import store as run_store
except ImportError:  # a tree before storage/ was split
    from mugraph.storage import run_store

from mugraph.stages.search.config import SearchConfig

args = json.loads(sys.argv[1])
header, _ = scale_trace.read_trace(Path(args["trace"]))
settings = dict(header["settings"])
# A trace that names no oracle was recorded when Z3 was the only one, one that names no order was
# explored in listing order (its tasks' ids say so): each setting as it was before it existed.
for name, before in (("oracle", "z3"), ("order", "index")):
    if name not in settings and name in getattr(SearchConfig, "__dataclass_fields__", {}):
        settings[name] = before
plan = make_plan(get_builtin(header["program"]), None, settings, header["budget"])
store_seconds = [0.0]
commits = [0]
depth = [0]  # complete_task calls complete_tasks in newer trees: time and count the outer call only
for name in ("complete_task", "complete_tasks", "add_tasks"):
    fn = getattr(run_store.RunStore, name, None)
    if fn is None:
        continue
    def timed(*a, _fn=fn, _name=name, **k):
        t = time.perf_counter()
        depth[0] += 1
        try:
            return _fn(*a, **k)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                store_seconds[0] += time.perf_counter() - t
                commits[0] += _name != "add_tasks"
    setattr(run_store.RunStore, name, timed)
kwargs = {}
if args.get("max_bundle"):
    from mugraph.pipeline import task_keys
    task_keys.MAX_BUNDLE = args["max_bundle"]
drv.confirm_task = scale_trace.replay_confirm
drv.warm_task = scale_trace.replay_warm
if args["new"]:
    kwargs["search_fn"] = functools.partial(scale_trace.replay_record, args["trace"], args["scale"])
else:
    drv.search_task = functools.partial(scale_trace.replay_dict, args["trace"], args["scale"])
client = Client(args["scheduler"])
client.wait_for_workers(args["processes"])
scheduler = psutil.Process(args["scheduler_pid"])
with run_store.RunStore.open(Path(args["store"]), plan.identity, counter_names=drv.COUNTER_NAMES) as st:
    c0, s0, t0 = time.process_time(), scheduler.cpu_times(), time.perf_counter()
    if args.get("profile"):
        import cProfile
        prof = cProfile.Profile()
        done = prof.runcall(drv.Driver(plan, st, client, progress_interval=1.0, **kwargs).run)
        prof.dump_stats(args["profile"])
    else:
        done = drv.Driver(plan, st, client, progress_interval=1.0, **kwargs).run()
    wall = time.perf_counter() - t0
    c1, s1 = time.process_time(), scheduler.cpu_times()
row = {"wall": wall, "driver_file": drv.__file__, "driver_cpu": c1 - c0,
       "scheduler_cpu": (s1.user + s1.system) - (s0.user + s0.system), "tasks": done["tasks_run"],
       "store_seconds": store_seconds[0], "commits": commits[0], "complete": done["complete"],
       "driver_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
row["mugraphs_found"] = sorted(d for f in range(len(plan.fragments)) for d in st.found(f))
print(json.dumps(row))
client.close()
"""


# The same trace through Dask alone: a client that submits a task's children the moment the scheduler
# reports it finished, from the trace it holds (no result fetched, no store, no bundles, one path a
# task). Its wall is what the scheduler and the simulated workers cost by themselves, so a driver's
# row beside it shows how much of the gap to the ideal is the driver's.
FLOOR_SCRIPT = r"""
import json, resource, sys, time
from pathlib import Path
import psutil
from distributed import Client, as_completed
import scale_trace

args = json.loads(sys.argv[1])
_, tasks = scale_trace.read_trace(Path(args["trace"]))
known = {(t.fragment, t.path) for t in tasks}
children = {(t.fragment, t.path): [p for p in t.frontier if (t.fragment, p) in known] for t in tasks}
client = Client(args["scheduler"])
client.wait_for_workers(args["processes"])
scheduler = psutil.Process(args["scheduler_pid"])
c0, s0, t0 = time.process_time(), scheduler.cpu_times(), time.perf_counter()
ac = as_completed()
what = {}

def submit(fragment, paths):
    by_depth = {}
    for p in paths:
        by_depth.setdefault(len(p), []).append(p)
    for depth, group in sorted(by_depth.items(), reverse=True):
        futs = client.map(scale_trace.floor_task, [args["trace"]] * len(group), [args["scale"]] * len(group),
                          [fragment] * len(group), group, pure=False, priority=depth)
        for f, p in zip(futs, group):
            what[f] = (fragment, p)
        ac.update(futs)

for fragment in sorted({t.fragment for t in tasks if not t.path}):
    submit(fragment, [()])
n = 0
for batch in ac.batches():
    for f in batch:
        fragment, path = what.pop(f)
        n += 1
        kids = children[(fragment, path)]
        if kids:
            submit(fragment, kids)
        f.release()
wall = time.perf_counter() - t0
c1, s1 = time.process_time(), scheduler.cpu_times()
row = {"wall": wall, "driver_file": scale_trace.__file__, "driver_cpu": c1 - c0,
       "scheduler_cpu": (s1.user + s1.system) - (s0.user + s0.system), "tasks": n, "store_seconds": 0.0,
       "commits": 0, "complete": n == len(tasks),
       "driver_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
       "mugraphs_found": None}
print(json.dumps(row))
client.close()
"""


def _source(spec: str, tmp: Path) -> tuple[str, Path]:
    """LABEL=TREE, the tree a directory or a git revision of this repository (exported)."""
    label, _, where = spec.partition("=")
    where = where.partition("@")[0]
    if Path(where).is_dir():
        return label, Path(where).resolve()
    out = tmp / f"src-{label}"
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", where, "mugraph"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return label, out


def _bundle(spec: str) -> int | None:
    """The `@bundle=K` suffix of a driver spec: the batching driver with at most K paths a task."""
    _, _, opt = spec.partition("@")
    return int(opt.partition("=")[2]) if opt.startswith("bundle=") else None


def _is_new(tree: Path) -> bool:
    return (tree / "mugraph" / "pipeline" / "records.py").is_file()


def replay(
    trace: Path,
    tree: Path,
    workers: int,
    scale: float,
    tmp: Path,
    processes: int,
    profile: Path | None = None,
    max_bundle: int | None = None,
    floor: bool = False,
) -> dict[str, Any]:
    """One replay of `trace` by the driver of `tree` with `workers` simulated workers (`floor`: by
    FLOOR_SCRIPT's client instead of a driver)."""
    env = {
        **os.environ,
        "PYTHONPATH": tree_path(tree, ROOT, ROOT / "benchmarks"),
        "PYTHONUNBUFFERED": "1",
        "DASK_DISTRIBUTED__WORKER__PROFILE__INTERVAL": "50ms",
        "DASK_DISTRIBUTED__ADMIN__TICK__LIMIT": "60s",
    }
    procs = max(1, min(processes, workers))
    threads = [workers // procs + (1 if i < workers % procs else 0) for i in range(procs)]
    sched_file = tmp / f"sched-{os.getpid()}-{time.monotonic_ns()}.json"
    started: list[subprocess.Popen[bytes]] = []
    try:
        sched = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                "--scheduler-file",
                str(sched_file),
            ],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(sched)
        deadline = time.monotonic() + 60
        while not sched_file.exists() or not sched_file.read_text().strip():
            if time.monotonic() > deadline:
                raise RuntimeError("the scheduler did not start")
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        for n in threads:
            started.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "distributed.cli.dask_worker",
                        address,
                        "--nthreads",
                        str(n),
                        "--nworkers",
                        "1",
                        "--no-nanny",
                        "--dashboard-address",
                        ":0",
                        "--memory-limit",
                        "0",
                    ],
                    env=env,
                    cwd=tmp,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        args = {
            "trace": str(trace.resolve()),
            "scale": scale,
            "scheduler": address,
            "scheduler_pid": sched.pid,
            "processes": procs,
            "store": str(tmp / f"store-{time.monotonic_ns()}.zarr"),
            "new": _is_new(tree),
            "profile": str(profile) if profile else None,
            "max_bundle": max_bundle,
        }
        out = subprocess.run(
            [sys.executable, "-c", FLOOR_SCRIPT if floor else DRIVER_SCRIPT, json.dumps(args)],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if out.returncode != 0:
            raise RuntimeError(f"driver failed:\n{out.stderr[-4000:]}")
        row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        if not floor and not row["driver_file"].startswith(str(tree)):
            raise RuntimeError(f"the driver ran from {row['driver_file']}, not from {tree}")
    finally:
        for p in reversed(started):
            p.terminate()
        for p in reversed(started):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:  # a worker whose scheduler is gone may wait to reconnect
                p.kill()
                p.wait()
    row.update(workers=workers, processes=procs, scale=scale)
    return row


def list_wall(tasks: list[TraceTask], workers: int, scale: float) -> float:
    """The wall of the trace on `workers` slots with a driver and scheduler that cost nothing: a
    task starts when its parent has finished and a slot is free, shallower paths first (the driver's
    priority). Not a lower bound: an order that knew each subtree's longest chain could do better;
    the gap between it and the ideal is what the order costs, the gap to the wall what overheads do."""
    by_key = {(t.fragment, t.path): t for t in tasks}
    ready: list[tuple[int, int, tuple[str, tuple[int, ...]]]] = []  # (depth, order, key)
    order = 0
    for t in tasks:
        if not t.path:
            heapq.heappush(ready, (0, order, (t.fragment, t.path)))
            order += 1
    running: list[tuple[float, tuple[str, tuple[int, ...]]]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < workers:
            _, _, key = heapq.heappop(ready)
            heapq.heappush(running, (now + by_key[key].seconds * scale, key))
        now, key = heapq.heappop(running)
        t = by_key[key]
        for p in t.frontier:
            if (t.fragment, p) in by_key:
                heapq.heappush(ready, (len(p), order, (t.fragment, p)))
                order += 1
    return now


def ideal_wall(stats: dict[str, Any], workers: int, scale: float) -> float:
    """The lower bound on any replay's wall: the task seconds spread over every slot, or the critical
    path (the longest chain of parent and child tasks) where that is longer."""
    return max(float(stats["task_seconds"]) * scale / workers, float(stats["critical_path"]) * scale)


def summarize(row: dict[str, Any], stats: dict[str, Any], tasks: list[TraceTask]) -> dict[str, Any]:
    n, s = row["workers"], row["scale"]
    ideal = ideal_wall(stats, n, s)
    return {
        **row,
        "ideal": ideal,
        "list_wall": list_wall(tasks, n, s),
        "efficiency": ideal / row["wall"],
        "tasks_per_s": row["tasks"] / row["wall"],
        "same_mugraphs": None if row["mugraphs_found"] is None else row["mugraphs_found"] == stats["digests"],
    }


def _same(same: bool | None) -> str:
    return "n/a" if same is None else "yes" if same else "NO"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | driver | N | scale | wall s | ideal s | efficiency | list s | driver CPU s (ms/task) "
        "| scheduler CPU s (ms/task) | tasks/s | store writes (s) | driver peak MiB | same μGraphs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per = 1000 / max(1, r["tasks"])
        lines.append(
            f"| {r['trace']} | {r['driver']} | {r['workers']} | {r['scale']:g} | {r['wall']:.1f} | "
            f"{r['ideal']:.1f} | {100 * r['efficiency']:.0f}% | {r['list_wall']:.1f} | {r['driver_cpu']:.1f} "
            f"({r['driver_cpu'] * per:.2f}) | {r['scheduler_cpu']:.1f} ({r['scheduler_cpu'] * per:.2f}) | "
            f"{r['tasks_per_s']:.0f} | {r.get('commits', r['tasks'])} ({r['store_seconds']:.1f}) | "
            f"{r['driver_peak_mib']:.0f} | {_same(r['same_mugraphs'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("program")
    rec.add_argument("--budget", type=int, default=10_000)
    rec.add_argument("--time-limit", type=float)
    rec.add_argument("--narrow", action="store_true", help="the test suite's narrowed limits")
    rec.add_argument("--out", type=Path, required=True)
    fro = sub.add_parser("from-store", help="the trace of a real run's store (its done tasks)")
    fro.add_argument("store", type=Path)
    fro.add_argument("--out", type=Path, required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("traces", type=Path, nargs="+")
    rep.add_argument("--workers", default="2,8,32")
    rep.add_argument("--scale", default="1", help="task seconds × this; one value, or one per N (comma-separated)")
    rep.add_argument(
        "--driver",
        action="append",
        help="LABEL=TREE (a directory or a git revision), optionally @bundle=K (this tree's driver "
        "with at most K paths a search task); or `floor`, Dask alone (FLOOR_SCRIPT)",
    )
    rep.add_argument("--processes", type=int, default=8, help="worker processes the N simulated workers share")
    rep.add_argument("--json", type=Path, help="append each row here as it is measured")
    tab = sub.add_parser("table", help="the table of rows appended by `replay --json`")
    tab.add_argument("rows", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        settings: dict[str, Any] = {}
        if args.narrow:
            from tests.helpers.narrow import NARROW

            settings = NARROW[args.program]
        header, tasks = record(args.program, args.budget, args.time_limit, settings)
    if args.cmd == "from-store":
        from store_trace import trace_from_store

        header, tasks = trace_from_store(args.store)
    if args.cmd in ("record", "from-store"):
        write_trace(args.out, header, tasks)
        st = trace_stats(tasks)
        print(json.dumps({**header, **{k: v for k, v in st.items() if k != "digests"}, "mugraphs": len(st["digests"])}))
        return
    if args.cmd == "table":
        print(table([json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]))
        return
    ns = [int(x) for x in args.workers.split(",")]
    scales = [float(x) for x in args.scale.split(",")]
    scales = scales * len(ns) if len(scales) == 1 else scales
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        specs = args.driver or [f"this={ROOT}"]
        drivers = [
            ("floor", ROOT, None, True) if s == "floor" else (*_source(s, tmp), _bundle(s), False) for s in specs
        ]
        for trace in args.traces:
            tasks = read_trace(trace)[1]
            stats = trace_stats(tasks)
            for n, scale in zip(ns, scales, strict=True):
                for label, tree, bundle, floor in drivers:
                    row = replay(trace, tree, n, scale, tmp, args.processes, max_bundle=bundle, floor=floor)
                    row = summarize(row, stats, tasks)
                    row.update(trace=trace.name.split(".")[0], driver=label)
                    rows.append(row)
                    brief = {k: v for k, v in row.items() if k != "mugraphs_found"}
                    print(json.dumps(brief), flush=True)
                    if args.json:
                        with open(args.json, "a") as f:
                            f.write(json.dumps(brief) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
