"""When the best μGraph is found: the search order against the listing order, serially, side by side.

Each (program, order) runs the serial search (`run_search`, the pipeline's task protocol, depth
first) in a child process with a fresh in-process memo, and records for every μGraph found the
run seconds and the states explored when its task ended. Every μGraph is then priced by the cost
model (`EMITTED.price` on H100, default layouts) against the reference, and the table gives the
best estimated speedup found by 5%, 10%, 25% and 50% of the run against the run's best, by time
and by states (states are exact and the same on any machine; seconds are this machine's).

    python benchmarks/bench_order.py --programs rms_norm gated_mlp
    python benchmarks/bench_order.py --programs gqa --time-limit 600 --out /tmp/gqa_order.json

With `--time-limit` a space that does not finish is compared by what each order found by then.
`--tree NAME=DIR` (repeatable) runs another checkout too (its own `order` if it has one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FRACTIONS = (0.05, 0.10, 0.25, 0.50, 1.0)

RUNNER = """
import json, sys, time
from mugraph.programs import resolve_program
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search
name, order, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
prog = resolve_program(name)
cfg = preset_config(prog.preset)
if order != "-":
    cfg = cfg.with_overrides({"order": order})
searcher = Searcher(Fragment(prog.reference(), cfg, prog.name))
seen, events = set(), []
def progress(report):
    for d, f in report.found.items():
        if d not in seen:
            seen.add(d)
            events.append([d, report.seconds, report.counters.nodes, f.graph])
report = run_search(searcher, time_limit=limit or None, on_progress=progress)
print(json.dumps({"events": events, "seconds": report.seconds, "states": report.counters.nodes,
                  "complete": report.complete, "tasks": report.tasks}))
"""


def run_one(tree: Path, program: str, order: str, limit: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, program, order, str(limit)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def speedups(program: str, graphs: Sequence[str]) -> list[float]:
    """Each μGraph's (JSON) estimated speedup over the program's reference: `EMITTED.price` on the
    default profile (H100), default layouts."""
    from mugraph.ir.serialize import loads
    from mugraph.programs import resolve_program
    from mugraph.stages.layout.emitted import EMITTED
    from mugraph.stages.layout.profiles import DEFAULT_PROFILE, get_profile

    profile = get_profile(DEFAULT_PROFILE)
    ref = EMITTED.price(resolve_program(program).reference(), None, profile)
    return [ref / EMITTED.price(loads(graph), None, profile) for graph in graphs]


def price_events(program: str, result: dict[str, Any]) -> list[tuple[float, int, float]]:
    """(seconds, states, speedup over the reference) of each μGraph, in the order found."""
    events = result["events"]
    priced = speedups(program, [graph for *_, graph in events])
    return [(float(seconds), int(states), x) for (_, seconds, states, _), x in zip(events, priced, strict=True)]


def best_by(rows: list[tuple[float, int, float]], seconds: float, states: int) -> tuple[list[float], list[float]]:
    """The best speedup found by each fraction of the run: by its seconds, and by its states."""
    by_time, by_states = [], []
    for f in FRACTIONS:
        by_time.append(max((s for t, _, s in rows if t <= f * seconds), default=0.0))
        by_states.append(max((s for _, n, s in rows if n <= f * states), default=0.0))
    return by_time, by_states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", nargs="+", default=["rms_norm", "gated_mlp"])
    parser.add_argument("--orders", nargs="+", default=["index", "cost"])
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR: another checkout, its default order")
    parser.add_argument("--time-limit", type=float, default=0.0, help="seconds per run (0: the whole space)")
    parser.add_argument("--out", type=Path, help="write every run's events here (JSON)")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    runs = [(f"this tree, order={o}", here, o) for o in args.orders]
    runs += [(name, Path(d), "-") for name, d in (t.split("=", 1) for t in args.tree)]
    saved: dict[str, Any] = {}
    head = " | ".join(f"{int(f * 100)}%" for f in FRACTIONS)
    print(f"| program | run | states | seconds | μGraphs | best by time: {head} | best by states: {head} |")
    print("|---|---|---|---|---|---|---|")
    for program in args.programs:
        for label, tree, order in runs:
            result = run_one(tree, program, order, args.time_limit)
            rows = price_events(program, result)
            t, n = best_by(rows, result["seconds"], result["states"])
            done = "" if result["complete"] else " (stopped)"
            print(
                f"| {program} | {label} | {result['states']:,}{done} | {result['seconds']:.1f} | {len(rows)} | "
                + " ".join(f"{x:.2f}x" for x in t)
                + " | "
                + " ".join(f"{x:.2f}x" for x in n)
                + " |",
                flush=True,
            )
            saved[f"{program}/{label}"] = {**result, "priced": rows}
    if args.out:
        args.out.write_text(json.dumps(saved))


if __name__ == "__main__":
    main()
