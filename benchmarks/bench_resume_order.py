"""What a run stopped and resumed holds: `mugraph optimize` with a time limit, then again on the same
store with another, through each tree side by side.

A user stops a long search (a time limit, Ctrl-C, a lost machine) and resumes it later. The store keeps
each pending row's rank, so the resumed run submits them in the order the stopped one would have;
a tree from before that resumed its pending rows shallower first. Per tree, one fresh run stopped at
`--first` seconds, then one resume stopped at `--second` seconds more; the table gives the best
ranked μGraph found by the end of each invocation and by a few run times in between (run seconds
across both invocations, from the store's find times), against the whole space's best.

    python benchmarks/bench_resume_order.py --program gqa --first 30 --second 90 --whole-best 13.73 \\
        --tree before=/work/wt-before

The trees alternate per repetition, so each pair ran under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree_path import tree_path

from mugraph.dashboards.find_times import best_at
from mugraph.storage.run.backends import open_existing

ROOT = Path(__file__).resolve().parents[1]


def optimize(program: str, store: Path, limit: float, fresh: bool, tree: Path, workers: int) -> dict[str, object]:
    """One `optimize` invocation through `tree`'s code; its last JSON line."""
    cmd = [sys.executable, "-m", "mugraph", "optimize", program, "--workers", str(workers), "--store", str(store)]
    cmd += ["--json", "--dashboard-address", ":0", "--time-limit", str(limit)] + (["--fresh"] if fresh else [])
    env = {**os.environ, "PYTHONPATH": tree_path(tree)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tree, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    last: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return last


def best_by(store: Path, seconds: float) -> tuple[float | None, float | None]:
    """The best speedup found by `seconds` of run time (None: none yet) and when it was found."""
    with open_existing(store) as st:
        whole = best_at(st, 0, 1.0)
        if whole is None:
            return None, None
        b = best_at(st, 0, min(1.0, seconds / whole["run_seconds"]))
        return (b["speedup"], b["found_seconds"]) if b is not None else (None, None)


def first_reached(store: Path, speedup: float) -> float | None:
    """The run seconds by which the run had found a μGraph at least `speedup` fast (to 0.1 s)."""
    with open_existing(store) as st:
        whole = best_at(st, 0, 1.0)
        if whole is None:
            return None
        lo, hi = 0.0, 1.0
        while (hi - lo) * whole["run_seconds"] > 0.1:
            mid = (lo + hi) / 2
            b = best_at(st, 0, mid)
            if b is not None and b["speedup"] is not None and b["speedup"] >= speedup - 1e-9:
                hi = mid
            else:
                lo = mid
        return hi * whole["run_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--program", default="gqa")
    parser.add_argument("--first", type=float, default=30.0, help="the first invocation's time limit")
    parser.add_argument("--second", type=float, default=90.0, help="the resumed invocation's time limit")
    parser.add_argument("--whole-best", type=float, default=None, help="the whole space's best speedup")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR: another checkout, run the same way")
    args = parser.parse_args()
    trees = [("this", ROOT)] + [(k, Path(v).resolve()) for k, v in (t.split("=", 1) for t in args.tree)]
    marks = [args.first, args.first + args.second / 3, args.first + 2 * args.second / 3]
    head = " | ".join(f"by {m:.0f} s" for m in marks)
    print(f"| tree | states at the stop, at the end | best at the stop | {head} | at the end (first found at) |")
    print("|---|---|---|" + "---|" * len(marks) + "---|")
    whole = args.whole_best

    def cell(speedup: float | None) -> str:
        if speedup is None:
            return "none"
        return f"{speedup:.2f}x" + (f" ({100 * speedup / whole:.0f}%)" if whole else "")

    with tempfile.TemporaryDirectory(prefix="resume-order-") as tmp:
        for k in range(args.repeat):
            for name, tree in trees:
                store = Path(tmp) / f"{name}-{k}.zarr"
                t0 = time.perf_counter()
                first = optimize(args.program, store, args.first, True, tree, args.workers)
                second = optimize(args.program, store, args.second, False, tree, args.workers)
                wall = time.perf_counter() - t0
                at_stop, _ = best_by(store, args.first)
                cells = [cell(best_by(store, m)[0]) for m in marks]
                end, _ = best_by(store, 1e9)
                found = first_reached(store, end) if end is not None else None
                when = f" ({found:.0f} s)" if found is not None else ""
                states = f"{int(str(first.get('states', 0))):,}, {int(str(second.get('states', 0))):,}"
                print(f"| {name} | {states} | {cell(at_stop)} | {' | '.join(cells)} | {cell(end)}{when} |")
                print(f"<!-- {name}: {wall:.0f} s wall for both invocations -->", file=sys.stderr)
                sys.stdout.flush()


if __name__ == "__main__":
    main()
