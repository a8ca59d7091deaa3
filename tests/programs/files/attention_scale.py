"""Attention with its softmax scale d^-1/2 (d = 64): O = softmax(Q·K·d^-1/2)·V, as a program writes it.

`once` scales Q·K by d^-1/2 as the program does. `split` scales Q and K by d^-1/4 each: the same in
real numbers, but d^-1/4 is rounded to float64 and the square of the rounded value is not 1/8, so the
fingerprints, which compute with the floats exactly, differ while float64 agrees: UNDECIDED, and the
verdict says why and what to write.
"""

from mugraph.ir import KernelGraph

name = "attention_scale"
preset = "attention"
D = 64


def _program(split: bool) -> KernelGraph:
    g = KernelGraph()
    q, k = g.new_input((2, 64, D), name="Q"), g.new_input((2, D, 128), name="K")
    v = g.new_input((2, 128, D), name="V")
    if split:
        s = g.matmul(g.mul_scalar(q, D**-0.25), g.mul_scalar(k, D**-0.25))
    else:
        s = g.mul_scalar(g.matmul(q, k), D**-0.5)
    e = g.exp(s)
    g.mark_output(g.matmul(g.div(e, g.reduction(e, 2)), v), "O")
    return g


def reference() -> KernelGraph:
    return _program(split=False)


experts = {"once": reference, "split": lambda: _program(split=True)}
