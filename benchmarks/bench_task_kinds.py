"""Where a run's worker time goes: one `mugraph optimize`-like run of a program's default space
through the Driver, on a fresh LocalCluster with a private redis memo, timed per kind of task
(warm, search, confirm, layout) from Dask's task stream, with each worker's CPU seconds.

    python benchmarks/bench_task_kinds.py rms_norm --workers 2

Run it with PYTHONPATH set to another source tree to compare trees side by side; the worker
processes inherit it.
"""

from __future__ import annotations

import argparse
import collections
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from distributed import get_task_stream

from mugraph.pipeline.cluster import dask_client, start_workers
from mugraph.pipeline.driver import COUNTER_NAMES, Driver
from mugraph.pipeline.plan import make_plan
from mugraph.pipeline.worker import MugraphPlugin, worker_environment
from mugraph.programs import get_builtin
from mugraph.storage.memo.session import private_memo
from mugraph.storage.run.store import RunStore


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def task_kinds(stream: list[dict[str, Any]], t0: float) -> tuple[dict[tuple[str, str], list[float]], dict[str, float]]:
    """{(kind, worker): [count, compute seconds]} and each worker's last compute end after `t0`."""
    by: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    end: dict[str, float] = {}
    for t in stream:
        key = t["key"][0] if isinstance(t["key"], tuple) else t["key"]
        kind = str(key).split("-")[0]
        for s in t["startstops"]:
            if s["action"] == "compute":
                slot = by[(kind, t["worker"])]
                slot[0] += 1
                slot[1] += s["stop"] - s["start"]
                end[t["worker"]] = max(end.get(t["worker"], 0.0), s["stop"] - t0)
    return dict(by), end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget", type=int, default=10_000)
    args = ap.parse_args()
    plan = make_plan(get_builtin(args.program), None, {}, args.budget)
    driver_cpu = _cpu_seconds()
    with tempfile.TemporaryDirectory() as d, private_memo(Path(d) / "memo") as url, dask_client(args.workers) as client:
        client.register_plugin(MugraphPlugin(url, "numpy"), name="mugraph")
        start_workers(client, worker_environment(url))
        with (
            RunStore.open(Path(d) / "run.zarr", plan.identity, counter_names=COUNTER_NAMES) as store,
            get_task_stream(client) as ts,
        ):
            before = client.run(_cpu_seconds)
            run_cpu = _cpu_seconds()
            t0 = time.time()
            driver = Driver(plan, store, client)
            result = driver.run()
            seconds = time.time() - t0
            run_cpu = _cpu_seconds() - run_cpu
            during = {w: c - before.get(w, 0.0) for w, c in client.run(_cpu_seconds).items()}
        driver_cpu = _cpu_seconds() - driver_cpu
        cpu = client.run(_cpu_seconds)
    by, end = task_kinds(ts.data, t0)
    print(
        f"{args.program}, {args.workers} worker(s): driver run {seconds:.1f} s, complete {result.get('complete')}, "
        f"{result.get('tasks_run')} tasks, {result.get('states')} states, {result.get('solver_calls')} solver calls; "
        f"driver process CPU {driver_cpu:.1f} s (cluster start and stop included), {run_cpu:.1f} s during the run"
    )
    c = driver.totals.counters
    print(
        f"  search counters: {c.seconds:.2f} s in search tasks, of which fingerprints {c.fingerprint_seconds:.2f} s "
        f"({c.fingerprints}) and solver {c.solver_seconds:.2f} s ({c.solver_calls} calls)"
    )
    names = {w: f"w{i}" for i, w in enumerate(sorted(cpu))}
    for (kind, worker), (n, s) in sorted(by.items()):
        print(f"  {names.get(worker, worker)} {kind:8s} {int(n):5d} tasks {s:7.2f} s")
    for w in sorted(cpu):
        print(
            f"  {names[w]} CPU {cpu[w]:.1f} s ({during.get(w, 0.0):.1f} s during the run), "
            f"last task ended at {end.get(w, 0.0):.1f} s"
        )


if __name__ == "__main__":
    main()
