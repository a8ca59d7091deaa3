"""A kernel graph the torch kernel tests launch: one graph-defined op holding a matmul."""

from __future__ import annotations

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import DType

NONE = (-1, -1, -1)


def silu_of_product(dtype: DType) -> KernelGraph:
    """silu(X @ W) in one kernel: 4 blocks over W's columns, 4 iterations over the contraction."""
    g = KernelGraph()
    x_d, w_d = g.new_input((16, 64), dtype, name="X"), g.new_input((64, 128), dtype, name="W")
    b = BlockGraph(grid=(4, 1, 1), forloop=4)
    x = b.new_input(x_d, NONE, fmap=1)
    w = b.new_input(w_d, (1, -1, -1), fmap=0)
    b.new_output(b.silu(b.accum_no_red(b.matmul(x, w))), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g
