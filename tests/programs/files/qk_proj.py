"""Two named outputs from one normalised input: Q = rms(X)·Wq and K = rms(X)·Wk.

The experts are the same computation told four ways. `right` marks Q then K; `reordered` marks K
first and `inputs_reordered` declares Wk before Wq, both right by name; `swapped` puts each result
under the other's name. The two outputs have the same shape and the fingerprints of one equal the
reference's of the other, so only a check that compares outputs by name rejects `swapped`.
"""

from mugraph.ir import KernelGraph, Tensor

name = "qk_proj"


def _inputs(wk_first: bool = False) -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    x = g.new_input((16, 256), name="X")
    if wk_first:
        wk = g.new_input((256, 64), name="Wk")
        return g, x, g.new_input((256, 64), name="Wq"), wk
    return g, x, g.new_input((256, 64), name="Wq"), g.new_input((256, 64), name="Wk")


def reference() -> KernelGraph:
    g, x, wq, wk = _inputs()
    h = g.rms_norm(x)
    g.mark_output(g.matmul(h, wq), "Q")
    g.mark_output(g.matmul(h, wk), "K")
    return g


def _expert(*, swap: bool = False, k_first: bool = False, wk_first: bool = False) -> KernelGraph:
    g, x, wq, wk = _inputs(wk_first)
    h = g.rms_norm(x)
    q, k = g.matmul(h, wq), g.matmul(h, wk)
    marks = (
        [(k, "Q" if swap else "K"), (q, "K" if swap else "Q")]
        if k_first
        else [
            (q, "K" if swap else "Q"),
            (k, "Q" if swap else "K"),
        ]
    )
    for t, label in marks:
        g.mark_output(t, label)
    return g


experts = {
    "right": _expert,
    "reordered": lambda: _expert(k_first=True),
    "inputs_reordered": lambda: _expert(wk_first=True),
    "swapped": lambda: _expert(swap=True),
}
