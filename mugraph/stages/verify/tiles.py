"""Device tensors as per-block tiles and back: a block-graph tensor is held for all blocks at once as
an array of shape (gx, gy, gz, *tile), where a grid axis along which the value does not vary has size 1
and broadcasts."""

from __future__ import annotations

from collections.abc import Sequence

from mugraph.ir.graph import BlockGraph
from mugraph.stages.verify.algebra import Algebra, Array

GRID_AXES = 3


def partition(alg: Algebra, x: Array, bg: BlockGraph, imap: Sequence[int], fmap: int) -> Array:
    """View a device tensor as per-block tiles: shape (gx|1, gy|1, gz|1, [F,] *tile).

    Along a mapped dim the grid index is the major part, then (with fmap) the iteration index.
    """
    xp = alg.xp
    axis_of_dim = {d: a for a, d in enumerate(imap) if d >= 0}
    split: list[int] = []
    pos_grid: dict[int, int] = {}
    pos_f = -1
    pos_tile: list[int] = []
    for d, n in enumerate(x.shape):
        if d in axis_of_dim:
            a = axis_of_dim[d]
            pos_grid[a] = len(split)
            split.append(bg.grid[a])
            n //= bg.grid[a]
        if d == fmap:
            pos_f = len(split)
            split.append(bg.forloop)
            n //= bg.forloop
        pos_tile.append(len(split))
        split.append(n)
    y = x.reshape(split)
    order = [pos_grid[a] for a in range(GRID_AXES) if a in pos_grid]
    order += [pos_f] if pos_f >= 0 else []
    y = xp.transpose(y, order + pos_tile)
    for a in range(GRID_AXES):
        if a not in pos_grid:
            y = xp.expand_dims(y, a)
    return y


def assemble(alg: Algebra, s: Array, bg: BlockGraph, omap: Sequence[int]) -> Array:
    """Inverse of partition for outputs: block b's tile goes to chunk b of each mapped dim."""
    xp = alg.xp
    rank = s.ndim - GRID_AXES
    s = xp.broadcast_to(s, tuple(bg.grid) + tuple(s.shape[GRID_AXES:]))
    order: list[int] = []
    out_shape: list[int] = []
    for d in range(rank):
        n = s.shape[GRID_AXES + d]
        for a in range(GRID_AXES):
            if omap[a] == d:
                order.append(a)
                n *= bg.grid[a]
        order.append(GRID_AXES + d)
        out_shape.append(n)
    unmapped = [a for a in range(GRID_AXES) if omap[a] < 0]  # each of size 1 (validated)
    y = xp.transpose(s, unmapped + order)
    return xp.ascontiguousarray(y).reshape(out_shape)
