"""Mirage's candidate generators for graph-defined ops (`dim_strategy.cc`), each returning a sorted list.

Grids: for each distinct dim d of the block graph's inputs and x in `grid_divisors` dividing d,
(d/x, 1, 1); with `attention_grids` also (batch, d/y, 1) and (batch, y, z) for each configured
(y, z); only grids with
`min_blocks`..`max_blocks` blocks, then (batch, 1, 1), batch being the first input's dim 0, unless
it has more blocks than a kernel may launch (the IR refuses such a graph, so its whole subtree
would be searched for nothing; a block graph's first input can be a weight, dim 0 4096).
Imaps: per input, the configured maps with grid axes of size 1 set to -1, then kept when every
mapped dim exists and divides; a combination is dropped when some grid axis larger than 1 splits
no input (every block along it would compute the same thing). Fmaps: -1 or any dim whose tile is
longer than 1. For-loop range: 1 when no input is split by the loop, else every configured range
dividing each split dim. Omaps: the configured maps valid for the grid and the outputs' rank.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import Dim3, Shape
from mugraph.stages.search.config import SearchConfig


def grid_candidates(shapes: Sequence[Shape], cfg: SearchConfig) -> list[Dim3]:
    if cfg.grids is not None:
        return sorted(set(cfg.grids))
    dims = sorted({d for s in shapes for d in s})
    batch = shapes[0][0]
    found: set[Dim3] = set()
    for d in dims:
        found.update((d // x, 1, 1) for x in cfg.grid_divisors if d % x == 0)
        if cfg.attention_grids:
            found.update((batch, d // y, 1) for y in cfg.attention_divisors if d % y == 0)
    if cfg.attention_grids:
        found.update((batch, y, z) for y, z in cfg.attention_yz)
    kept = {g for g in found if cfg.min_blocks <= g[0] * g[1] * g[2] <= min(cfg.max_blocks, DEFAULT_LIMITS.max_blocks)}
    if batch <= DEFAULT_LIMITS.max_blocks:
        kept.add((batch, 1, 1))
    return sorted(kept)


def _normalise(imap: Dim3, grid: Dim3) -> Dim3:
    a, b, c = (m if g > 1 else -1 for m, g in zip(imap, grid, strict=True))
    return (a, b, c)


def imap_options(shape: Shape, grid: Dim3, cfg: SearchConfig) -> list[Dim3]:
    """The imaps one input may use under `grid`."""
    out: set[Dim3] = set()
    for raw in cfg.imaps:
        m = _normalise(raw, grid)
        mapped = [d for d in m if d >= 0]
        if len(set(mapped)) != len(mapped) or any(d >= len(shape) for d in mapped):
            continue
        if all(d < 0 or shape[d] % g == 0 for d, g in zip(m, grid, strict=True)):
            out.add(m)
    return sorted(out)


def imap_combos(shapes: Sequence[Shape], grid: Dim3, cfg: SearchConfig) -> list[tuple[Dim3, ...]]:
    per_input = [imap_options(s, grid, cfg) for s in shapes]
    combos = []
    for combo in itertools.product(*per_input):
        if all(g == 1 or any(m[axis] >= 0 for m in combo) for axis, g in enumerate(grid)):
            combos.append(combo)
    return combos  # product of sorted lists: already in lexicographic order


def tile_after_grid(shape: Shape, grid: Dim3, imap: Dim3) -> Shape:
    tile = list(shape)
    for d, g in zip(imap, grid, strict=True):
        if d >= 0:
            tile[d] //= g
    return tuple(tile)


def loop_options(tiles: Sequence[Shape], cfg: SearchConfig) -> list[tuple[tuple[int, ...], int]]:
    """(fmaps, for-loop range) pairs for inputs whose per-block tiles are `tiles`."""
    per_input = [sorted({-1} | {f for f in cfg.fmaps if 0 <= f < len(t) and t[f] > 1}) for t in tiles]
    out: list[tuple[tuple[int, ...], int]] = []
    for fmaps in itertools.product(*per_input):
        split = [t[f] for t, f in zip(tiles, fmaps, strict=True) if f >= 0]
        if not split:
            out.append((fmaps, 1))
            continue
        out.extend((fmaps, r) for r in sorted(set(cfg.franges)) if all(n % r == 0 for n in split))
    return out


def omap_candidates(grid: Dim3, rank: int, cfg: SearchConfig) -> list[Dim3]:
    """The omaps a block graph of this grid can close with, for outputs of this rank (a fresh list;
    every block node asks, so the answer is worked out once per grid, rank and omap list)."""
    return list(_omaps(grid, rank, cfg.omaps))


@functools.lru_cache(maxsize=4096)
def _omaps(grid: Dim3, rank: int, omaps: tuple[Dim3, ...]) -> tuple[Dim3, ...]:
    out = set()
    for m in omaps:
        mapped = [d for d in m if d >= 0]
        if len(set(mapped)) != len(mapped) or any(d >= rank for d in mapped):
            continue
        if all((g > 1) == (d >= 0) for d, g in zip(m, grid, strict=True)):
            out.add(m)
    return tuple(sorted(out))


def block_source_options(n_tensors: int, cfg: SearchConfig) -> list[tuple[int, ...]]:
    """The input tuples a new block graph may read, sorted (a block graph ranks by its tuple).
    "mirage": `block_sources` alone. "subsets": every non-empty subset of it, so a block graph
    need not load a tensor it never reads. (Subsets of that size of all the graph's tensors cost
    more and found nothing more on rms_norm, gated_mlp and lora; benchmarks/RESULTS.md.)"""
    mirage = block_sources(n_tensors, cfg)
    if mirage is None:
        return []
    if cfg.block_inputs == "mirage":
        return [mirage]
    return list(_subsets(mirage))


@functools.lru_cache(maxsize=64)
def _subsets(pool: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(sorted(c for k in range(1, len(pool) + 1) for c in itertools.combinations(pool, k)))


def max_block_sources(cfg: SearchConfig) -> int:
    """The most inputs any new block graph reads under `block_sources` (the search's counting
    bounds rest on it, so it stays beside the rule)."""
    return 4 if cfg.four_input_blocks else 3


def block_sources(n_tensors: int, cfg: SearchConfig) -> tuple[int, ...] | None:
    """Mirage's single input tuple of a new block graph: all four tensors (lora), the first three
    when there are three, else the last two. Where the graph holds one tensor (a program of one
    input, at its root), that one, unless the config keeps Mirage's rule exactly (`block_inputs`
    "mirage"), under which no block graph is ever made there: without it, LayerNorm or a softmax of
    one input could never be fused."""
    if n_tensors == 4 and cfg.four_input_blocks:
        return (0, 1, 2, 3)
    if n_tensors == 3:
        return (0, 1, 2)
    if n_tensors >= 2:
        return (n_tensors - 2, n_tensors - 1)
    if n_tensors == 1 and cfg.block_inputs != "mirage":
        return (0,)
    return None
