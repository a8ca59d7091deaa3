"""RMSNorm with a weight, then a linear layer with bias: four inputs, as a PyTorch model lowers it.
The expert: one kernel for the norm and the product (the rms accumulated beside it, the division
after the loop), then the bias added by a pre-defined op (an input read in the loop cannot meet
the accumulated product after it)."""

from mugraph.ir import BlockGraph, KernelGraph, Tensor
from mugraph.ir.types import OpKind


def inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    return (
        g,
        g.new_input((16, 768), "float32", name="x"),
        g.new_input((1, 768), "float32", name="scale"),
        g.new_input((768, 1536), "float32", name="W"),
        g.new_input((1, 1536), "float32", name="bias"),
    )


def reference() -> KernelGraph:
    g, x, s, w, b = inputs()
    g.mark_output(g.add(g.matmul(g.mul(g.rms_norm(x, 1e-6), s), w), b), "y")
    return g


def fused_then_bias() -> KernelGraph:
    g, x_d, s_d, w_d, b_d = inputs()
    bg = BlockGraph(grid=(48, 1, 1), forloop=16)
    x = bg.new_input(x_d, (-1, -1, -1), fmap=1)
    s = bg.new_input(s_d, (-1, -1, -1), fmap=1)
    w = bg.new_input(w_d, (1, -1, -1), fmap=0)
    product = bg.accum_no_red(bg.matmul(bg.mul(x, s), w))
    bg.new_output(bg.div(product, bg.forloop_accum(x, OpKind.ACCUM_RMS, 1e-6)), (1, -1, -1))
    g.mark_output(g.add(g.customized(bg)[0], b_d), "y")
    return g


experts = {"fused_then_bias": fused_then_bias}
