"""The bundling simulator (benchmarks/bench_bundles.py) runs the driver's own rules over a recorded
trace: every path runs once, no wall beats the bound, and bundles cut the Dask tasks only where work
waits many times over for every worker thread."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_bundles import bound, simulate
from bench_scale import ROOT
from scale_trace import read_trace

TRACE = ROOT / "benchmarks" / "data" / "scale_rms_norm.jsonl.gz"


def test_the_simulation_runs_each_path_and_never_beats_the_bound() -> None:
    _, tasks = read_trace(TRACE)
    for workers in (1, 2, 64):
        for rule in ("base", "depth", "mixed"):
            wall, dask_tasks = simulate(tasks, workers, rule, latency=0.0, per_path=0.0, per_task=0.0)
            assert wall >= bound(tasks, workers) - 1e-9
            assert dask_tasks > 0
    one, _ = simulate(tasks, 1, "mixed", latency=0.0, per_path=0.0, per_task=0.0)
    assert abs(one - sum(t.seconds for t in tasks)) < 1e-6  # one thread: exactly the task seconds
    _, many = simulate(tasks, 64, "mixed", latency=0.0, per_path=0.0, per_task=0.0)
    _, two = simulate(tasks, 2, "mixed", latency=0.0, per_path=0.0, per_task=0.0)
    assert two < many == len(tasks)  # 64 threads: one path a task; 2 threads: paths wait, bundles form
