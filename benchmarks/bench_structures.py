"""How many of the search's states are one structure again under another grid, for-loop or map.

Walks K tasks of a recorded scale trace of search tree 2 (drawn by recorded seconds, as
`bench_speed.py --trace` draws them), each under its recorded budget, through the instantiated
tree (`expand.child_list`, one state per grid, map and for-loop range) as that tree's search
walked them. It counts
the distinct states three ways:
- as they are;
- with every fmap and for-loop range erased;
- with the grid and imaps (and omaps) erased as well.
The ratios are the room a search that lists each structure once would have. Caching the present
per-instantiation work cannot reach it. Per structure (all three erased), it also counts the distinct
new-term tuples its states bring (what the oracle would judge once per structure) and the distinct
tensor-shape signatures (what its shape and memory checks would still meet row by row).

    python benchmarks/bench_structures.py benchmarks/data/scale_lora_t2.jsonl.gz --sample 40
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Hashable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_speed import sample_tasks

from mugraph.programs import get_builtin
from mugraph.stages.search.config import parse_override, preset_config
from mugraph.stages.search.expand import Child, child_list, instance_at, kept_indices
from mugraph.stages.search.explore import Found, Fragment, SearchCounters, Searcher
from mugraph.stages.search.state import BlockSpec, State
from mugraph.stages.search.task_paths import Path as TaskPath
from mugraph.stages.search.task_paths import split_run


def _block(spec: BlockSpec, loop: bool, grid: bool) -> Hashable:
    maps = tuple((i.source, i.imap if grid else None, i.fmap if loop else None) for i in spec.inputs)
    return (spec.ops, spec.outputs, maps, spec.grid if grid else None, spec.forloop if loop else None,
            spec.omap if grid else None)  # fmt: skip


def structure(state: State, loop: bool = True, grid: bool = True) -> Hashable:
    """The state, with the for-loop's choices (fmaps, range) erased unless `loop`, and the grid's
    (grid, imaps, omaps) unless `grid`."""
    ops = tuple(
        (o.kind, o.inputs, o.attrs, None if o.block is None else _block(o.block, loop, grid)) for o in state.ops
    )
    b = state.block
    if b is None:
        return (ops,)
    fmaps = tuple(i.fmap for i in b.inputs) if loop else None
    return (
        ops,
        b.sources,
        b.grid if grid else None,
        b.imaps if grid else None,
        b.forloop if loop else None,
        fmaps,
        b.ops,
    )


def _stack(searcher: Searcher, task: TaskPath, outputs: int) -> list[tuple[TaskPath, State | Child]]:
    """The stack a task of the instantiated tree starts from: its node, or its run of siblings."""
    cfg, root = searcher.fragment.config, searcher.fragment.root
    run = split_run(task)
    if run is None:
        return [(task, instance_at(root, cfg, task))]
    kids = child_list(instance_at(root, cfg, run.parent), cfg, outputs)
    # the traces this replays were explored in listing order, where a run covers an index range
    kept = [
        i
        for i in kept_indices(kids, cfg, outputs, searcher.oracle.kept)
        if run.first <= i and (run.last is None or i <= run.last)
    ]
    return [(run.parent + (i,), kids[i]) for i in reversed(kept)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path, help="a scale trace (bench_scale.py) of one fragment")
    ap.add_argument("--sample", type=int, default=40, help="how many tasks to draw")
    args = ap.parse_args()
    name, settings, tasks = sample_tasks(args.trace, args.sample)
    prog = get_builtin(name)
    config = preset_config(prog.preset).with_overrides(dict(parse_override(s) for s in settings))
    searcher = Searcher(Fragment(prog.reference(), config, name))
    outputs = len(searcher.fragment.output_names)
    seen: tuple[set[Hashable], set[Hashable], set[Hashable]] = (set(), set(), set())
    terms: set[Hashable] = set()
    shapes: set[Hashable] = set()
    nodes = 0
    for path, budget in tasks:
        stack = _stack(searcher, tuple(path), outputs)
        done = 0
        while stack and (budget is None or done < budget):  # as Searcher.explore walks
            p, top = stack.pop()
            state = top.build() if isinstance(top, Child) else top
            done += 1
            seen[0].add(structure(state))
            seen[1].add(structure(state, loop=False))
            key = structure(state, loop=False, grid=False)
            seen[2].add(key)
            terms.add((key, state.new))
            tensors = state.tensors if state.block is None else state.block.tensors
            shapes.add((key, tuple(t.shape for t in tensors)))
            if state.block is None and isinstance(searcher._verify(state, p, SearchCounters()), Found):
                continue
            kids = child_list(state, config, outputs)
            kept = kept_indices(kids, config, outputs, searcher.oracle.kept)
            stack.extend((p + (i,), kids[i]) for i in reversed(kept))
        nodes += done
    distinct = [len(s) for s in seen]
    print(
        json.dumps(
            {
                "program": name,
                "tasks": len(tasks),
                "states": nodes,
                "distinct": distinct[0],
                "without_loop": distinct[1],
                "without_loop_and_grid": distinct[2],
                "states_per_structure": round(nodes / distinct[2], 1),
                "term_tuples": len(terms),
                "states_per_term_tuple": round(nodes / len(terms), 2),
                "shape_signatures": len(shapes),
                "states_per_shape_signature": round(nodes / len(shapes), 2),
            }
        )
    )


if __name__ == "__main__":
    main()
