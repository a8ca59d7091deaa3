"""What the local cluster costs the driver's process while it waits: CPU seconds per second of an
idle cluster (the nannies live in the driver's process, the scheduler in its own), with Dask's own
intervals for the periodic callbacks against the ones `pipeline.cluster` sets (IDLE_SETTINGS and
CLUSTER_SYNC_SECONDS), each setting ablated.
Runs alternate in one invocation (the machines are shared and noisy); medians and ranges.

    python benchmarks/bench_idle.py [--workers 2] [--seconds 15] [--repeats 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from mugraph.pipeline import cluster

DASK_DEFAULTS: dict[str, object] = {
    "distributed.admin.tick.interval": "20ms",
    "distributed.admin.system-monitor.interval": "500ms",
    "distributed.worker.memory.monitor-interval": "100ms",
    "cluster-sync": 1.0,  # LocalCluster's scheduler_sync_interval (an argument, not a Dask setting)
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def idle_cpu(settings: dict[str, object], workers: int, seconds: float) -> float:
    """Milliseconds of this process's CPU per second of an idle cluster started with `settings`."""
    saved = cluster.WORKER_SETTINGS, cluster.CLUSTER_SYNC_SECONDS
    given = dict(settings)
    cluster.CLUSTER_SYNC_SECONDS = float(given.pop("cluster-sync", saved[1]))  # type: ignore[arg-type]
    cluster.WORKER_SETTINGS = {**saved[0], **given}
    try:
        with cluster.dask_client(workers=workers, dashboard_address=":0") as client:
            cluster.start_workers(client)
            time.sleep(2.0)  # start-up settles
            c0, t0 = _cpu(), time.perf_counter()
            time.sleep(seconds)
            c1, t1 = _cpu(), time.perf_counter()
    finally:
        cluster.WORKER_SETTINGS, cluster.CLUSTER_SYNC_SECONDS = saved
    return (c1 - c0) / (t1 - t0) * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    variants: dict[str, dict[str, object]] = {"dask defaults": dict(DASK_DEFAULTS), "mugraph": {}}
    for key in DASK_DEFAULTS:  # each of mugraph's settings back at Dask's value, the others kept
        variants[f"mugraph, {key.rsplit('.', 2)[-2] if '.' in key else key} at Dask's"] = {key: DASK_DEFAULTS[key]}
    got: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, settings in variants.items():
            got[name].append(idle_cpu(settings, args.workers, args.seconds))
    print(f"| settings ({args.workers} workers, idle {args.seconds:.0f} s) | driver process ms CPU/s, median | range |")
    print("|---|---|---|")
    for name, values in got.items():
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}-{max(values):.1f} |")


if __name__ == "__main__":
    main()
