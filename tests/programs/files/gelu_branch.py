"""A projection and a GELU branch scaled far below it (a gate near its initial value), side by side:
O = concat(X·W, 2^-40·gelu(Y)).

`right` computes the program as written. `silu_exp` writes gelu(Y) as silu(Y)·exp(Y): another function
(at y = 1, 0.84 against 1.99), whose values float64 cannot see beside X·W's (2^-40 of them); the
fingerprints must tell the two activations apart.
"""

from mugraph.ir import KernelGraph, Tensor

name = "gelu_branch"

BRANCH_SCALE = 2.0**-40


def _program(branch: str) -> KernelGraph:
    g = KernelGraph()
    x, w, y = g.new_input((16, 256), name="X"), g.new_input((256, 128), name="W"), g.new_input((16, 64), name="Y")
    act: Tensor = g.gelu(y) if branch == "gelu" else g.mul(g.silu(y), g.exp(y))
    g.mark_output(g.concat(g.matmul(x, w), g.mul_scalar(act, BRANCH_SCALE), 1), "O")
    return g


def reference() -> KernelGraph:
    return _program("gelu")


experts = {"right": reference, "silu_exp": lambda: _program("silu_exp")}
