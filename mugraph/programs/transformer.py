"""A decoding transformer block: a program larger than one LAX fragment, to exercise the split.

The IR has no transpose, so K and V come from a KV cache given as inputs already laid out
(Kt [64,512], V [512,64]) and only Q is projected. One head of width 64, 16 tokens:

    H = X + softmax(rms_norm(X)·Wq · Kt) · V · Wo       (softmax without max-subtraction: exp / sum)
    O = H + (silu(rms_norm(H)·W1) * (rms_norm(H)·W2)) · W3
"""

from __future__ import annotations

from mugraph.ir.graph import KernelGraph
from mugraph.programs.program import Program, register

TOKENS, MODEL, HEAD, CONTEXT, HIDDEN = 16, 1024, 64, 512, 2048


def transformer_block_reference() -> KernelGraph:
    g = KernelGraph()
    x = g.new_input((TOKENS, MODEL), name="X")
    wq = g.new_input((MODEL, HEAD), name="Wq")
    kt = g.new_input((HEAD, CONTEXT), name="Kt")
    v = g.new_input((CONTEXT, HEAD), name="V")
    wo = g.new_input((HEAD, MODEL), name="Wo")
    w1 = g.new_input((MODEL, HIDDEN), name="W1")
    w2 = g.new_input((MODEL, HIDDEN), name="W2")
    w3 = g.new_input((HIDDEN, MODEL), name="W3")
    q = g.matmul(g.rms_norm(x), wq)
    e = g.exp(g.matmul(q, kt))
    a = g.matmul(g.div(e, g.reduction(e, 1)), v)
    h = g.add(x, g.matmul(a, wo))
    hn = g.rms_norm(h)
    gate = g.mul(g.silu(g.matmul(hn, w1)), g.matmul(hn, w2))
    g.mark_output(g.add(h, g.matmul(gate, w3)), "O")
    return g


register(
    Program(
        "transformer_block",
        "Decoding transformer block: attention on a KV cache, gated MLP",
        "mlp",
        transformer_block_reference,
    )
)
