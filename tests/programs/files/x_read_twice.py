"""A gated MLP, silu(X·W1) * (X·W3), whose expert's block graph loads X twice (once beside W1, once
beside W3): equivalent to the reference, but no block graph of the search reads one tensor twice."""

from mugraph.ir import BlockGraph, KernelGraph, Tensor

name = "x_read_twice"
preset = "mlp"
NONE = (-1, -1, -1)


def _inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    return g, g.new_input((8, 512), name="X"), g.new_input((512, 512), name="W1"), g.new_input((512, 512), name="W3")


def reference() -> KernelGraph:
    g, x, w1, w3 = _inputs()
    g.mark_output(g.mul(g.silu(g.matmul(x, w1)), g.matmul(x, w3)), "O")
    return g


def expert() -> KernelGraph:
    g, x_d, w1_d, w3_d = _inputs()
    b = BlockGraph(grid=(64, 1, 1), forloop=16)
    x, w1 = b.new_input(x_d, NONE, fmap=1), b.new_input(w1_d, (1, -1, -1), fmap=0)
    x2, w3 = b.new_input(x_d, NONE, fmap=1), b.new_input(w3_d, (1, -1, -1), fmap=0)
    a1, a3 = b.accum_no_red(b.matmul(x, w1)), b.accum_no_red(b.matmul(x2, w3))
    b.new_output(b.mul(b.silu(a1), a3), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


experts = {"twice": expert}
