"""The Dask pipeline side by side: 1, 2 and 4 worker processes on the same program and limits, and a
run killed (-9) twice then resumed, measured in one invocation so the ratios share the machine's load.

    python benchmarks/bench_pipeline.py [--programs lora,rms_norm] [--full] [--workers 1,2,4] [--write]
    python benchmarks/bench_pipeline.py --tree base=/work/base --tree new=. --full --programs rms_norm --old-space
    python benchmarks/bench_pipeline.py --full --programs lora --budget 10000 --resume-only   # ~1 hour

`--tree LABEL=PATH` runs the same rows on several source trees (PYTHONPATH is the tree), side by side;
`--old-space` searches the space before it was widened on the trees that know the widening.

Per worker count: wall time, speedup over 1 worker, the driver's run time (`done`'s seconds: the
cluster already up, so start-up is left out) and its speedup, solver calls (ratio to 1 worker),
max/mean worker busy time, peak resident memory of the driver and of each worker, store size. The
resume figure runs on an external `dask scheduler` + `dask worker` cluster, so the workers outlive the
killed driver and their CPU time covers the tasks that were running when it died: extra work = CPU
time of the killed + resumed runs over that of an uninterrupted run on a fresh cluster, minus 1.
Default limits are the narrowed ones of the test suite; `--full` uses the programs' full presets.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tree_path import tree_path  # noqa: E402

from tests.helpers.narrow import NARROW, old_space_settings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
OLD_SPACE_SETTINGS: dict[str, list[str]] = {}  # per program, set by main() for the tree being run
MARK = "<!-- bench_pipeline -->"
END_MARK = "<!-- bench_pipeline:end -->"


def _settings(name: str, full: bool) -> list[str]:
    out = [x for s in OLD_SPACE_SETTINGS.get(name, []) for x in ("--set", s)]
    if full:
        return out
    for k, v in NARROW[name].items():
        out += ["--set", f"{k}={json.dumps(v)}"]
    return out


def _optimize(name: str, store: Path, full: bool, budget: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mugraph.cli",
        "optimize",
        name,
        *_settings(name, full),
        "--store",
        str(store),
        "--budget",
        str(budget),
        "--json",
        "--dashboard-address",
        ":0",
        *extra,
    ]


def _done(out: str) -> dict[str, Any]:
    last: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert last["event"] == "done", last
    return last


def run_workers(name: str, workers: int, full: bool, budget: int, tmp: Path) -> dict[str, Any]:
    store = tmp / f"{name}-w{workers}.zarr"
    t0 = time.perf_counter()
    proc = subprocess.run(
        _optimize(name, store, full, budget, "--workers", str(workers)),
        capture_output=True,
        text=True,
        cwd=tmp,
        check=True,
    )
    wall = time.perf_counter() - t0
    d = _done(proc.stdout)
    busy = list(d["worker_busy_seconds"].values())
    return {
        "program": name,
        "workers": workers,
        "wall": wall,
        "run": d["seconds"],
        "states": d["states"],
        "tasks": d["tasks_run"],
        "solver_calls": d["solver_calls"],
        "mugraphs": len(d["mugraphs"]),
        "imbalance": max(busy) / (sum(busy) / len(busy)) if busy else float("nan"),
        "driver_rss": d["driver_peak_rss_mib"],
        "worker_rss": max(d["worker_peak_rss_mib"].values()),
        "store_mib": d["store_bytes"] / 2**20,
        "digests": d["mugraphs"],
    }


class ExternalCluster:
    def __init__(self, tmp: Path, workers: int) -> None:
        sched = tmp / f"sched-{time.monotonic_ns()}.json"
        mod = [sys.executable, "-m"]
        self.procs = [
            subprocess.Popen(
                [
                    *mod,
                    "distributed.cli.dask_scheduler",
                    "--scheduler-file",
                    str(sched),
                    "--port",
                    "0",
                    "--dashboard-address",
                    ":0",
                ],
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        ]
        while not sched.exists():
            time.sleep(0.1)
        time.sleep(0.5)
        self.address = json.loads(sched.read_text())["address"]
        self.procs.append(
            subprocess.Popen(
                [*mod, "distributed.cli.dask_worker", self.address, "--nworkers", str(workers), "--nthreads", "1"],
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        from distributed import Client

        self.client = Client(self.address)
        self.client.wait_for_workers(workers, timeout=60)

    def cpu_seconds(self) -> float:
        import resource

        def cpu() -> float:
            r = resource.getrusage(resource.RUSAGE_SELF)
            return r.ru_utime + r.ru_stime

        return float(sum(self.client.run(cpu).values()))

    def close(self) -> None:
        self.client.close()
        for p in reversed(self.procs):
            p.terminate()
            p.wait(timeout=30)


def run_resume(name: str, workers: int, full: bool, budget: int, tmp: Path, kills: int) -> dict[str, Any]:
    """CPU seconds of the workers: uninterrupted vs killed `kills` times and resumed."""
    out: dict[str, Any] = {"program": name, "workers": workers, "kills": kills}
    for label in ("whole", "killed"):
        cluster = ExternalCluster(tmp, workers)
        try:
            store = tmp / f"{name}-{label}.zarr"
            args = _optimize(name, store, full, budget, "--scheduler", cluster.address)
            c0 = cluster.cpu_seconds()
            t0 = time.perf_counter()
            if label == "killed":
                whole_wall = out["whole_wall"]
                for i in range(kills):
                    p = subprocess.Popen(args, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(whole_wall * (i + 1) / (kills + 1) * 0.8)
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    time.sleep(1.0)  # let the orphaned tasks finish on the workers
            proc = subprocess.run(args, cwd=tmp, capture_output=True, text=True, check=True)
            out[f"{label}_wall"] = time.perf_counter() - t0
            time.sleep(0.5)
            out[f"{label}_cpu"] = cluster.cpu_seconds() - c0
            out[f"{label}_digests"] = _done(proc.stdout)["mugraphs"]
        finally:
            cluster.close()
    out["extra_work"] = out["killed_cpu"] / out["whole_cpu"] - 1
    out["same_result"] = out["killed_digests"] == out["whole_digests"]
    return out


def table(rows: list[dict[str, Any]], resumes: list[dict[str, Any]], full: bool, budget: int) -> str:
    lines = [
        MARK,
        "",
        f"### Dask pipeline ({'full presets' if full else 'narrowed limits of the test suite'}, budget {budget}, "
        f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')})",
        "",
        "| program | tree, workers | wall s | speedup | run s (speedup) | states | tasks | solver calls (× 1 worker) | "
        "busy max/mean | driver RSS MiB | worker RSS MiB (max) | store MiB | same μGraphs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base: dict[str, dict[str, Any]] = {}
    for r in rows:
        b = base.setdefault(f"{r['tree']}|{r['program']}", r)
        lines.append(
            f"| {r['program']} | {r['tree']}, {r['workers']} | {r['wall']:.1f} | {b['wall'] / r['wall']:.2f} | "
            f"{r['run']:.1f} ({b['run'] / r['run']:.2f}) | {r['states']:,} | {r['tasks']:,} | "
            f"{r['solver_calls']:,} ({r['solver_calls'] / max(b['solver_calls'], 1):.2f}) | "
            f"{r['imbalance']:.2f} | {r['driver_rss']:.0f} | {r['worker_rss']:.0f} | {r['store_mib']:.2f} | "
            f"{'yes' if r['digests'] == b['digests'] else 'NO'} |"
        )
    if resumes:
        lines += [
            "",
            "| program | workers | kills | uninterrupted worker CPU s | killed + resumed CPU s | "
            "extra work | same μGraphs |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in resumes:
            lines.append(
                f"| {r['program']} | {r['workers']} | {r['kills']} | {r['whole_cpu']:.1f} | "
                f"{r['killed_cpu']:.1f} | {100 * r['extra_work']:+.1f}% | "
                f"{'yes' if r['same_result'] else 'NO'} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="lora,rms_norm")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--budget", type=int, default=500)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--resume-only", action="store_true", help="Only the kill-and-resume rows (long presets).")
    ap.add_argument("--write", action="store_true", help="Replace the pipeline section of RESULTS.md.")
    ap.add_argument("--tree", action="append", help="LABEL=PATH of a source tree (default: this checkout)")
    ap.add_argument("--old-space", action="store_true", help="the search space before it was widened")
    args = ap.parse_args()
    specs = args.tree or [f"this={ROOT}"]
    trees = [(label, Path(path).resolve()) for label, _, path in (t.partition("=") for t in specs)]
    rows, resumes = [], []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for name in args.programs.split(","):
            for label, tree in trees:
                (tmp / label).mkdir(exist_ok=True)
                os.environ["PYTHONPATH"] = tree_path(tree)
                OLD_SPACE_SETTINGS.clear()
                if args.old_space:
                    OLD_SPACE_SETTINGS[name] = old_space_settings(tree, name)
                for w in [] if args.resume_only else (int(x) for x in args.workers.split(",")):
                    rows.append({**run_workers(name, w, args.full, args.budget, tmp / label), "tree": label})
                    print(json.dumps({k: v for k, v in rows[-1].items() if k != "digests"}), flush=True)
                if not args.no_resume:
                    resumes.append(run_resume(name, 2, args.full, args.budget, tmp / label, args.kills))
                    print(json.dumps({k: v for k, v in resumes[-1].items() if not k.endswith("digests")}), flush=True)
    text = table(rows, resumes, args.full, args.budget)
    print(text)
    if args.write:
        old = RESULTS.read_text() if RESULTS.exists() else ""
        head, _, rest = old.partition(MARK)
        tail = rest.partition(END_MARK)[2] if END_MARK in rest else ""
        RESULTS.write_text(head.rstrip() + "\n\n" + text + END_MARK + tail)


if __name__ == "__main__":
    main()
