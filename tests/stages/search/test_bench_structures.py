"""`benchmarks/bench_structures.py` erases exactly the instantiation choices: states that differ
only in grid and imaps, or only in fmaps and for-loop range, become one structure, and nothing
else does."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from bench_structures import structure

from mugraph.programs import get_builtin
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.expand import children
from mugraph.stages.search.explore import Fragment


def test_structures_erase_grids_and_loops_only() -> None:
    prog = get_builtin("rms_norm")
    cfg = preset_config(prog.preset)
    root = Fragment(prog.reference(), cfg, "rms_norm").root
    opened = [s for s in children(root, cfg) if s.block is not None]
    assert len({s.block.grid for s in opened if s.block is not None}) > 1
    by_sources: dict[tuple[int, ...], set[object]] = {}
    for s in opened:
        assert s.block is not None
        by_sources.setdefault(s.block.sources, set()).add(structure(s, loop=False, grid=False))
    # Every opened graph of one input tuple is one structure once the grid is erased, and
    # different input tuples stay apart.
    assert all(len(v) == 1 for v in by_sources.values())
    assert len({next(iter(v)) for v in by_sources.values()}) == len(by_sources)
    assert len({structure(s) for s in opened}) == len(opened)
    # The for-loop choices under one opened graph differ only in fmaps and range.
    looped = children(opened[0], cfg)
    assert len(looped) > 1
    assert len({structure(s, loop=False) for s in looped}) == 1
    assert len({structure(s) for s in looped}) == len(looped)
