"""How good the best μGraph is early in a run: `mugraph optimize` with each search order, side by side.

Per program and order, a fresh run through the real pipeline (`optimize --workers N`, a local Dask
cluster, a Zarr store): the store keeps each μGraph's find time, and `dashboards.find_times.best_at`
gives the best ranked μGraph found by 5%, 10%, 25% and 50% of the run, against the run's best.
With `--time-limit` the run stops there, and `--whole-best NAME=X` gives the whole space's best
speedup to compare against (for a space too large to search here).

    python benchmarks/bench_best_early.py --programs rms_norm gated_mlp lora
    python benchmarks/bench_best_early.py --programs gqa --time-limit 180 --whole-best gqa=13.73

`--tree NAME=DIR` (repeatable) runs another checkout too, say the commit before a change to the
driver's task order (`git worktree add DIR COMMIT`): the same orders, through that tree's code.

The trees and orders alternate per program, so each pair ran under the same load.
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

FRACTIONS = (0.05, 0.10, 0.25, 0.50, 1.0)


ROOT = Path(__file__).resolve().parents[1]


def run(
    program: str, order: str, workers: int, limit: float | None, where: Path, tree: tuple[str, Path] = ("", ROOT)
) -> tuple[Path, float, str]:
    store = where / f"{program}-{tree[0]}-{order}.zarr"
    cmd = [sys.executable, "-m", "mugraph", "optimize", program, "--workers", str(workers), "--store", str(store)]
    cmd += ["--fresh", "--json", "--dashboard-address", ":0", "--set", f"order={order}"]
    if limit:
        cmd += ["--time-limit", str(limit)]
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": tree_path(tree[1])}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tree[1], env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    return store, wall, f"{last.get('states', 0):,} states, {'complete' if last.get('complete') else 'stopped'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", nargs="+", default=["rms_norm", "gated_mlp"])
    parser.add_argument("--orders", nargs="+", default=["index", "cost"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--whole-best", action="append", default=[], help="NAME=SPEEDUP of the whole space")
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR: another checkout, run the same way")
    args = parser.parse_args()
    trees = [("", ROOT)] + [(k, Path(v).resolve()) for k, v in (t.split("=", 1) for t in args.tree)]
    whole = {k: float(v) for k, v in (w.split("=", 1) for w in args.whole_best)}
    head = " | ".join(f"{int(f * 100)}%" for f in FRACTIONS)
    print(f"| program | order | run | whole best | {head} |")
    print("|---|---|---|---|" + "---|" * len(FRACTIONS))
    with tempfile.TemporaryDirectory(prefix="best-early-") as tmp:
        for program in args.programs:
            for (tree_name, tree_dir), order in [(t, o) for t in trees for o in args.orders]:
                tree = (tree_name or "this", tree_dir)
                store, wall, what = run(program, order, args.workers, args.time_limit, Path(tmp), tree)
                with open_existing(store) as st:
                    names = [f["name"] for f in st.fragments()]
                    for name in names:
                        cells = []
                        best = None
                        for f in FRACTIONS:
                            b = best_at(st, name, f)
                            if b is None:
                                cells.append("–")
                                continue
                            best = whole.get(program, b["best_speedup"])
                            s = b["speedup"]
                            cells.append("none" if s is None else f"{s:.2f}x ({100 * s / best:.0f}%)")
                        label = program if len(names) == 1 else f"{program} {name}"
                        whole_text = "–" if best is None else f"{best:.2f}x"
                        shown = order if not tree_name else f"{tree_name}: {order}"
                        print(f"| {label} | {shown} | {what}, {wall:.0f} s wall | {whole_text} | {' | '.join(cells)} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
