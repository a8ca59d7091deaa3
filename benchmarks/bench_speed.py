"""Search speed side by side: the same serial search runs on several source trees in one session.

Each tree is a checkout of some commit (a `git worktree`: the baseline, the current code, the
baseline plus one change for an ablation). Per program, the trees run one after another, each in
a child process whose working directory and PYTHONPATH are that tree, with a cold in-process
verdict memo, and all do the same work: the budgeted tasks of the search in order until `--states`
states are explored (every tree explores the same nodes, since the tree is deterministic), or the
whole space (`--full`). Machines here are shared and noisy, so the table reports ratios to the
first tree measured in the same run.

    python benchmarks/bench_speed.py --tree base=/work/base --tree new=. --states 20000
    python benchmarks/bench_speed.py --tree base=/work/base --tree new=. --programs rms_norm --full

`--trace FILE --sample K` instead replays, on each tree, K tasks of a recorded scale trace
(`bench_scale.py`; its paths name nodes of the tree that recorded it, so only trees of that search
tree version can replay it), drawn with probability proportional to their recorded seconds: the mix of work
a whole-space run does, in minutes, where the first states from the root are not typical of the
space (lora's costliest tasks are deep in it). `--repeat R` alternates the trees R times; `--warm` times
a second pass over the tasks, its verdicts all in the memo as they mostly are in a long run.
`--whole` draws only tasks that finished their subtree and explores each subtree without a budget:
the fair comparison between trees that explore different nodes (a budget would stop them at
different places).

    python benchmarks/bench_speed.py --tree base=/work/base --tree new=. \
        --trace benchmarks/data/scale_lora_w15.jsonl.gz --sample 40 --repeat 2

`--old-space NAME` passes the overrides that give the search space before it was widened
(for-loop ranges {4, 16, 64}, no (batch, 8, 16) attention grid) to the trees that know them, so
that every tree searches the same tree; `--widened` adds a row per program for the current
default space of the last tree.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_trace import read_trace  # as the other benchmarks import it (one module name)
from tree_path import tree_path

from mugraph.stages.search.task_paths import SIBLINGS
from tests.helpers.narrow import old_space_settings

PROGRAMS = ["rms_norm", "lora", "gated_mlp", "gqa"]
MIRAGE_8_THREADS = {"rms_norm": 25, "lora": 213, "gqa": 111, "gated_mlp": 38}  # CMU 15-618, seconds


# Runs inside the child, against the tree's own mugraph (only APIs the baseline has too).
RUNNER = """
import json, sys
from mugraph.ir.canonical import canonical_digest
from mugraph.programs import get_builtin
from mugraph.stages.search.config import parse_override, preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search
name, states, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
prog = get_builtin(name)
config = preset_config(prog.preset).with_overrides(dict(parse_override(s) for s in settings))
searcher = Searcher(Fragment(prog.reference(), config, name))
stop = (lambda r: r.counters.nodes >= states) if states else None
report = run_search(searcher, 500, None, stop=stop)
expert = canonical_digest(next(iter(prog.experts.values()))())
print(json.dumps({"counters": report.counters.as_dict(), "complete": report.complete,
                  "mugraphs": len(report.found), "expert_found": expert in report.found}))
"""


# Runs inside the child: the sampled tasks, each explored under its recorded budget.
SAMPLE_RUNNER = """
import json, sys, time
from mugraph.programs import get_builtin
from mugraph.stages.search.config import parse_override, preset_config
from mugraph.stages.search.explore import Fragment, Searcher
name, tasks, warm = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "warm"
prog = get_builtin(name)
config = preset_config(prog.preset).with_overrides(dict(parse_override(s) for s in sys.argv[4:]))
searcher = Searcher(Fragment(prog.reference(), config, name))
for path, budget in tasks if warm else ():
    searcher.explore(tuple(path), budget)
nodes = children = found = 0
t0 = time.perf_counter()
for path, budget in tasks:
    r = searcher.explore(tuple(path), budget)
    nodes += r.counters.nodes
    children += r.counters.children
    found += len(r.found)
print(json.dumps({"seconds": time.perf_counter() - t0, "nodes": nodes, "children": children, "found": found}))
"""


def sample_tasks(
    trace: Path, k: int, whole: bool = False, seed: int = 1
) -> tuple[str, list[str], list[tuple[list[int], int | None]]]:
    """The program, its settings and K of the trace's tasks, drawn by recorded seconds. `whole`:
    only tasks that finished their subtree (no frontier) and name one node, explored without a
    budget, so trees that explore different nodes still do the same work: that subtree."""
    header, all_tasks = read_trace(trace)
    if len(header["fragments"]) != 1:
        raise SystemExit(f"{trace}: a trace of one fragment is needed (it has {len(header['fragments'])})")
    tasks = [task for task in all_tasks if task.seconds > 0]
    if whole:
        tasks = [t for t in tasks if not t.frontier and not (t.path and t.path[-1] >= SIBLINGS)]
    drawn = random.Random(seed).choices(tasks, weights=[task.seconds for task in tasks], k=k)
    settings = [f"{key}={json.dumps(value)}" for key, value in header["settings"].items()]
    return str(header["program"]), settings, [(list(task.path), None if whole else task.budget) for task in drawn]


def run_sample(
    tree: Path, name: str, settings: list[str], tasks: list[tuple[list[int], int | None]], warm: bool
) -> dict[str, Any]:
    args = [sys.executable, "-c", SAMPLE_RUNNER, name, json.dumps(tasks), "warm" if warm else "cold", *settings]
    proc = subprocess.run(
        args,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": tree_path(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the sampled tasks of {name} failed:\n{proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return out


def sample_table(trees: list[tuple[str, Path]], trace: Path, k: int, repeat: int, warm: bool, whole: bool) -> list[str]:
    name, settings, tasks = sample_tasks(trace, k, whole)
    memo = "timed on a second pass (memo warm, as in a long run)" if warm else "cold memo"
    lines = [
        f"{name}: {k} {'whole subtrees of tasks' if whole else 'tasks'} of {trace.name} drawn by recorded seconds, "
        f"{memo}; trees alternated {repeat}x",
        "| program | tree | run | states | children listed | μGraphs | seconds | × first tree |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rep in range(repeat):
        first: float | None = None
        for label, tree in trees:
            r = run_sample(tree, name, settings, tasks, warm)
            first = first or r["seconds"]
            lines.append(
                f"| {name} | {label} | {rep + 1} | {r['nodes']:,} | {r['children']:,} | {r['found']} | "
                f"{r['seconds']:.1f} | {first / r['seconds']:.2f} |"
            )
            print(lines[-1], flush=True)
    return lines


def run(tree: Path, name: str, settings: list[str], states: int) -> dict[str, Any]:
    args = [sys.executable, "-c", RUNNER, name, str(states), *settings]
    env = {**os.environ, "PYTHONPATH": tree_path(tree)}
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: the search of {name} failed:\n{proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    out["wall"] = time.perf_counter() - t0
    return out


def row(label: str, name: str, r: dict[str, Any], base: dict[str, Any] | None) -> str:
    c = r["counters"]
    rate = c["nodes"] / c["seconds"]
    ratio = "1.00" if base is None else f"{rate / (base['counters']['nodes'] / base['counters']['seconds']):.2f}"
    done = "yes" if r["complete"] else "no"
    nodes = f"{c['structures']:,}" if "structures" in c else "one per state"
    return (
        f"| {name} | {label} | {c['nodes']:,} | {nodes} | {rate:,.0f} | {ratio} | {c['seconds']:.0f} | {done} | "
        f"{c['solver_calls']:,} ({c['solver_seconds']:.0f} s) | {c['prefiltered']:,} | "
        f"{c['fingerprints']:,} ({c['fingerprint_seconds']:.1f} s) | {r['mugraphs']} | "
        f"{'yes' if r['expert_found'] else 'no'} | {MIRAGE_8_THREADS[name]} s |"
    )


HEADER = (
    "| program | tree | states (instantiations) | tree nodes (structures) | states/s | × first tree | seconds | "
    "complete | solver calls (s) | refuted without Z3 | fingerprints (s) | μGraphs | expert found | "
    "Mirage C++, 8 threads |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="LABEL=PATH of a source tree (first is the base)")
    ap.add_argument("--programs", nargs="*", default=PROGRAMS)
    ap.add_argument("--states", type=int, default=20_000, help="stop after the task that reaches this many states")
    ap.add_argument("--full", action="store_true", help="search each space to completion")
    ap.add_argument("--old-space", action="store_true", help="search the space before widening on every tree")
    ap.add_argument("--widened", action="store_true", help="also the current default space on the last tree")
    ap.add_argument("--out", type=Path, help="append the table to this file")
    ap.add_argument("--trace", type=Path, help="replay tasks of this scale trace instead of searching from the root")
    ap.add_argument("--sample", type=int, default=40, help="with --trace: how many tasks to draw")
    ap.add_argument("--repeat", type=int, default=1, help="with --trace: alternate the trees this many times")
    ap.add_argument("--warm", action="store_true", help="with --trace: time a second pass over the tasks")
    ap.add_argument(
        "--whole", action="store_true", help="with --trace: draw tasks that finished their subtree; explore it all"
    )
    args = ap.parse_args()
    trees = [(label, Path(path).resolve()) for label, _, path in (t.partition("=") for t in args.tree)]
    if args.trace is not None:
        emit("\n".join(sample_table(trees, args.trace, args.sample, args.repeat, args.warm, args.whole)), args.out)
        return
    limit = 0 if args.full else args.states
    lines = [HEADER]
    for name in args.programs:
        base: dict[str, Any] | None = None
        for label, tree in trees:
            settings = old_space_settings(tree, name) if args.old_space else []
            r = run(tree, name, settings, limit)
            lines.append(row(label, name, r, base))
            base = base or r
            print(lines[-1], flush=True)
        if args.widened:
            label, tree = trees[-1]
            r = run(tree, name, [], limit)
            lines.append(row(f"{label}, widened space", name, r, base))
            print(lines[-1], flush=True)
    emit("\n".join(lines), args.out)


def emit(table: str, out: Path | None) -> None:
    """Print the table, and append it to `out` with the command that made it."""
    print(table)
    if out:
        with out.open("a") as f:
            f.write(f"\n<!-- bench_speed {time.strftime('%Y-%m-%d %H:%M')} {' '.join(sys.argv[1:])} -->\n{table}\n")


if __name__ == "__main__":
    main()
