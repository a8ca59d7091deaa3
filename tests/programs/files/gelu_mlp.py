"""A three-input MLP as a user writes it: X·W1, GELU, then ·W2, with the user's expert.

The expert fuses X·W1 and the GELU into one block graph that reads X and W1 only (tiles X [8,32],
W1 [32,8] on 64 blocks and 16 iterations), then multiplies by W2 in a kernel matmul. Under
Mirage's block-input rule a block graph at this point reads all three inputs, so this expert is
outside its space.
"""

from mugraph.ir import BlockGraph, KernelGraph, Tensor

name = "gelu_mlp"
preset = "mlp"


def _inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    return g, g.new_input((8, 512), name="X"), g.new_input((512, 512), name="W1"), g.new_input((512, 512), name="W2")


def reference() -> KernelGraph:
    g, x, w1, w2 = _inputs()
    g.mark_output(g.matmul(g.gelu(g.matmul(x, w1)), w2), "O")
    return g


def expert() -> KernelGraph:
    g, x_d, w1_d, w2_d = _inputs()
    b = BlockGraph(grid=(64, 1, 1), forloop=16)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)
    w1 = b.new_input(w1_d, (1, -1, -1), fmap=0)
    b.new_output(b.gelu(b.accum_no_red(b.matmul(x, w1))), (1, -1, -1))
    (h,) = g.customized(b)
    g.mark_output(g.matmul(h, w2_d), "O")
    return g


experts = {"clean": expert}
