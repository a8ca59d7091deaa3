"""A program of one input, silu(layer_norm(X)), and its fusion into one block graph reading X: the
search must be able to open a block graph on a program's only tensor."""

from mugraph.ir import BlockGraph, KernelGraph
from mugraph.ir.graph import Tensor


def _inputs() -> tuple[KernelGraph, Tensor]:
    g = KernelGraph()
    return g, g.new_input((64, 256), name="X")


def reference() -> KernelGraph:
    g, x = _inputs()
    g.mark_output(g.silu(g.layer_norm(x, eps=1e-5)), "O")
    return g


def fused() -> KernelGraph:
    g, x_d = _inputs()
    b = BlockGraph(grid=(64, 1, 1), forloop=1)
    x = b.new_input(x_d, (0, -1, -1))
    b.new_output(b.accum_no_red(b.silu(b.layer_norm(x, eps=1e-5))), (0, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


experts = {"fused": fused}
