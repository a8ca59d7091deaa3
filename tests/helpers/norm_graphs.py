"""Norm programs the eps tests share: rms_norm(X) @ W, its fused expert shape, and layer_norm(X @ W),
each at the shapes a test picks (small for the interpreters, larger where tiling matters)."""

from __future__ import annotations

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import DType


def rms_matmul(eps: float, rows: int, k: int, n: int, dtype: DType | str = DType.FLOAT16) -> KernelGraph:
    """rms_norm(X, eps) @ W with X [rows, k] and W [k, n]."""
    g = KernelGraph()
    x, w = g.new_input((rows, k), dtype, name="X"), g.new_input((k, n), dtype, name="W")
    g.mark_output(g.matmul(g.rms_norm(x, eps=eps), w), "O")
    return g


def fused_rms_matmul(eps: float, rows: int, k: int, n: int, grid: int, forloop: int) -> KernelGraph:
    """The expert's shape of rms_norm(X) @ W: accum_rms beside the matmul, the division after the loop."""
    g = KernelGraph()
    x_d, w_d = g.new_input((rows, k), name="X"), g.new_input((k, n), name="W")
    b = BlockGraph(grid=(grid, 1, 1), forloop=forloop)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)
    w = b.new_input(w_d, (1, -1, -1), fmap=0)
    b.new_output(b.div(b.accum_no_red(b.matmul(x, w)), b.accum_rms(x, eps=eps)), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def matmul_layer_norm(eps: float, rows: int, k: int, n: int) -> KernelGraph:
    """layer_norm(X @ W, eps) with X [rows, k] and W [k, n]."""
    g = KernelGraph()
    x, w = g.new_input((rows, k), name="X"), g.new_input((k, n), name="W")
    g.mark_output(g.layer_norm(g.matmul(x, w), eps=eps), "O")
    return g
