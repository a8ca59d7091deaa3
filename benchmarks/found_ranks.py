"""Where a run's μGraphs lie in the search tree: each found μGraph's depth, rank and estimated speedup.

A path's rank is what the driver orders tasks by (`stages.search.task_paths`): the sum, over its steps,
of each step's place among its kept siblings in the search order. Reading a finished or stopped run's
store, this replays each found path through a searcher of the same program and config, and prints the
μGraphs best first with when they were found, so one can see whether the good ones lie at low ranks
(found early by rank) or not.

    python benchmarks/found_ranks.py /tmp/gqa.zarr gqa --top 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_order import speedups

from mugraph.programs import resolve_program
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.storage.run.backends import open_existing


def places(searcher: Searcher, path: tuple[int, ...]) -> list[int]:
    """Each step's place among its parent's kept children, in exploration order."""
    out = []
    for depth in range(len(path)):
        kids, _ = searcher.kept_children(path[:depth])
        at = kids.position(path[depth])
        if at is None:
            raise SystemExit(f"path {list(path)}: step {depth} is not a kept child (another config?)")
        out.append(at)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", type=Path)
    ap.add_argument("program", help="the built-in program the store searched (default config)")
    ap.add_argument("--fragment", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    prog = resolve_program(args.program)
    searcher = Searcher(Fragment(prog.reference(), preset_config(prog.preset), prog.name))
    with open_existing(args.store) as store:
        found = list(store.found(args.fragment).values())
    priced = speedups(args.program, [rec.graph for rec in found])
    rows = [(x, rec, places(searcher, rec.path)) for x, rec in zip(priced, found, strict=True)]
    rows.sort(key=lambda r: -r[0])
    print("| speedup | μGraph | found at (s, states) | depth | rank | places |")
    print("|---|---|---|---|---|---|")
    for speedup, rec, at in rows[: args.top]:
        when = "–" if rec.seconds is None else f"{rec.seconds:.1f} s, {rec.states:,}"
        print(f"| {speedup:.2f}x | {rec.digest[:16]} | {when} | {len(at)} | {sum(at)} | {at} |")


if __name__ == "__main__":
    main()
