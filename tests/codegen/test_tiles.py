"""Tile geometry: padded extents and the offsets an imap/fmap gives each block and iteration, checked
against the float64 interpreter's own partition of a device tensor into tiles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.tiles import input_access, layout_strides, padded
from mugraph.stages.verify.algebra import Float64Algebra
from mugraph.stages.verify.tiles import partition


def test_padded_extents() -> None:
    assert [padded(n) for n in (1, 2, 16, 17, 24, 64, 96, 128, 4096)] == [1, 16, 16, 32, 32, 64, 128, 128, 4096]


def test_layout_strides() -> None:
    assert layout_strides((4, 8, 6), 2) == (48, 6, 1)
    assert layout_strides((4, 8, 6), 1) == (48, 1, 8)
    assert layout_strides((4, 8, 6), 0) == (1, 24, 4)


def _evaluate(expr: str, scope: dict[str, object]) -> np.ndarray:
    """A generated offset expression with tl.arange as NumPy's arange."""

    class TL:
        @staticmethod
        def arange(lo: int, hi: int) -> np.ndarray:
            return np.arange(lo, hi)

    return np.asarray(eval(expr, {"tl": TL, **scope}))


@pytest.mark.parametrize("inner", [2, 1, 0])
@pytest.mark.parametrize(("imap", "fmap"), [((1, -1, -1), 0), ((-1, -1, -1), 1), ((0, 2, -1), 1), ((2, 0, 1), -1)])
def test_input_offsets_equal_the_interpreters_partition(imap: tuple[int, int, int], fmap: int, inner: int) -> None:
    """Row-major (inner 2) and the other innermost dims a chosen layout may give a device tensor."""
    shape, grid, forloop = (4, 8, 6), (2, 2, 2), 2
    g = KernelGraph()
    x = g.new_input(shape, name="X")
    bg = BlockGraph(grid=[grid[a] if imap[a] >= 0 else 1 for a in range(3)], forloop=forloop)
    tile = bg.new_input(x, imap, fmap).shape
    strides = layout_strides(shape, inner)
    acc = input_access(shape, tile, bg.grid, imap, fmap, forloop, strides)
    data = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    memory = np.zeros(data.size)
    for idx in itertools.product(*(range(n) for n in shape)):
        memory[sum(i * s for i, s in zip(idx, strides, strict=True))] = data[idx]
    tiles = partition(Float64Algebra(np), data, bg, imap, fmap)
    for bx, by, bz in itertools.product(*(range(n) for n in bg.grid)):
        base = int(_evaluate(acc.base, {"pid_x": bx, "pid_y": by, "pid_z": bz}))
        offsets = _evaluate(acc.offsets, {})
        for i in range(forloop if fmap >= 0 else 1):
            want = tiles[bx, by, bz, i] if fmap >= 0 else tiles[bx, by, bz]
            got = memory[(base + i * acc.step + offsets)[tuple(slice(0, n) for n in tile)]]
            np.testing.assert_array_equal(got, want)
