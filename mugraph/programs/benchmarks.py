"""Mirage's benchmark programs and their expert μGraphs (shapes and experts from
reference/benchmarks.md; each expert is verified equal to its reference by the test suite)."""

from __future__ import annotations

from mugraph.ir.graph import BlockGraph, KernelGraph, Tensor
from mugraph.programs.program import Program, register

NONE = (-1, -1, -1)


# -- RMSNorm + Linear: demo shapes X [16,4096], W [4096,6144] -------------------------------------
RMS_M, RMS_K, RMS_N = 16, 4096, 6144


def _rms_inputs() -> tuple[KernelGraph, Tensor, Tensor]:
    g = KernelGraph()
    return g, g.new_input((RMS_M, RMS_K), name="X"), g.new_input((RMS_K, RMS_N), name="W")


def rms_norm_reference() -> KernelGraph:
    g, x, w = _rms_inputs()
    g.mark_output(g.matmul(g.rms_norm(x), w), "O")
    return g


def _rms_norm_fused(blocks: int, forloop: int) -> KernelGraph:
    """One kernel: the RMS accumulator runs beside the matmul, the division after the loop."""
    g, x_d, w_d = _rms_inputs()
    b = BlockGraph(grid=(blocks, 1, 1), forloop=forloop)
    x = b.new_input(x_d, NONE, fmap=1)  # [16, K/forloop]
    w = b.new_input(w_d, (1, -1, -1), fmap=0)  # [K/forloop, N/blocks]
    b.new_output(b.div(b.accum_no_red(b.matmul(x, w)), b.accum_rms(x)), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def rms_norm_expert() -> KernelGraph:
    """Mirage's demo μGraph: grid 64, for-loop range 64 (tiles X [16,64], W [64,96])."""
    return _rms_norm_fused(64, 64)


def rms_norm_paper() -> KernelGraph:
    """The best RMSNorm+Linear μGraph of Mirage's paper: grid 256, for-loop range 32 (tiles
    X [16,128], W [128,24])."""
    return _rms_norm_fused(256, 32)


# -- LoRA: X [16,256], W [256,4096], A [256,16], B [16,4096] ---------------------------------------


def _lora_inputs() -> tuple[KernelGraph, list[Tensor]]:
    g = KernelGraph()
    shapes = {"X": (16, 256), "W": (256, 4096), "A": (256, 16), "B": (16, 4096)}
    return g, [g.new_input(s, name=n) for n, s in shapes.items()]


def lora_reference() -> KernelGraph:
    g, (x, w, a, b) = _lora_inputs()
    g.mark_output(g.add(g.matmul(x, w), g.matmul(g.matmul(x, a), b)), "O")
    return g


def lora_expert_saved() -> KernelGraph:
    """Expert B, the form of every saved LoRA μGraph: three block matmuls and an add, grid 64."""
    g, (x_d, w_d, a_d, b_d) = _lora_inputs()
    bg = BlockGraph(grid=(64, 1, 1), forloop=1)
    x = bg.new_input(x_d, NONE)  # [16,256]
    w = bg.new_input(w_d, (1, -1, -1))  # [256,64]
    a = bg.new_input(a_d, NONE)  # [256,16]
    b = bg.new_input(b_d, (1, -1, -1))  # [16,64]
    m1, m2 = bg.matmul(x, w), bg.matmul(x, a)
    bg.new_output(bg.accum_no_red(bg.add(bg.matmul(m2, b), m1)), (1, -1, -1))
    g.mark_output(g.customized(bg)[0], "O")
    return g


def lora_expert_concat() -> KernelGraph:
    """Expert A (cpp_examples/lora.cc): concat(X, XA) · concat(W, B), the lora preset's macro."""
    g, (x_d, w_d, a_d, b_d) = _lora_inputs()
    bg = BlockGraph(grid=(128, 1, 1), forloop=2)
    x = bg.new_input(x_d, NONE, fmap=1)  # [16,128]
    w = bg.new_input(w_d, (1, -1, -1), fmap=0)  # [128,32]
    a = bg.new_input(a_d, NONE, fmap=0)  # [128,16]
    b = bg.new_input(b_d, (1, -1, -1))  # [16,32]
    d = bg.matmul(x, a)
    m = bg.matmul(bg.concat(x, d, 1), bg.concat(w, b, 0))
    bg.new_output(bg.accum_no_red(m), (1, -1, -1))
    g.mark_output(g.customized(bg)[0], "O")
    return g


# -- Gated MLP: X [8,4096], W1, W2 [4096,4096] -----------------------------------------------------


def _mlp_inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    x = g.new_input((8, 4096), name="X")
    return g, x, g.new_input((4096, 4096), name="W1"), g.new_input((4096, 4096), name="W2")


def gated_mlp_reference() -> KernelGraph:
    g, x, w1, w2 = _mlp_inputs()
    g.mark_output(g.mul(g.silu(g.matmul(x, w1)), g.matmul(x, w2)), "O")
    return g


def gated_mlp_expert() -> KernelGraph:
    """cpp_examples/gated_mlp.cc: for-loop range 64, one of Mirage's default ranges (the Python
    reference_mugraphs version uses 32, which the default search does not try)."""
    g, x_d, w1_d, w2_d = _mlp_inputs()
    b = BlockGraph(grid=(64, 1, 1), forloop=64)
    x = b.new_input(x_d, NONE, fmap=1)  # [8,64]
    w1 = b.new_input(w1_d, (1, -1, -1), fmap=0)  # [64,64]
    w2 = b.new_input(w2_d, (1, -1, -1), fmap=0)
    a1, a2 = b.accum_no_red(b.matmul(x, w1)), b.accum_no_red(b.matmul(x, w2))
    b.new_output(b.mul(b.silu(a1), a2), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


# -- Group-query attention: Q [2,256,64], K [2,64,4096], V [2,4096,64] ----------------------------


def _attn_inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    q = g.new_input((2, 256, 64), name="Q")
    return g, q, g.new_input((2, 64, 4096), name="K"), g.new_input((2, 4096, 64), name="V")


def _attention(g: KernelGraph, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    e = g.exp(g.matmul(q, k))
    return g.matmul(g.div(e, g.reduction(e, 2)), v)


def _attention_expert(norm_q: bool, norm_v: bool, grid: tuple[int, int, int] = (2, 16, 4)) -> KernelGraph:
    """K1 splits the KV length over grid.y into partial attentions (Q's rows over grid.z);
    K2 merges them. Tile shapes in the comments are for the default grid (2, 16, 4)."""
    g, q_d, k_d, v_d = _attn_inputs()
    b1 = BlockGraph(grid=grid, forloop=4)
    q = b1.new_input(q_d, (0, -1, 1))  # [1,64,64]
    k = b1.new_input(k_d, (0, 2, -1), fmap=2)  # [1,64,64]
    v = b1.new_input(v_d, (0, 1, -1), fmap=1)  # [1,64,64]
    q = b1.rms_norm(q) if norm_q else q
    v = b1.rms_norm(v) if norm_v else v
    e = b1.exp(b1.matmul(q, k))
    b1.new_output(b1.accum_no_red(b1.matmul(e, v)), (0, 2, 1))  # T1 [2,256,1024]
    b1.new_output(b1.accum_sum(e), (0, 2, 1))  # T2 [2,256,16]
    t1_d, t2_d = g.customized(b1)
    b2 = BlockGraph(grid=(2, 16, 1), forloop=1)
    t1 = b2.new_input(t1_d, (0, 1, -1))  # [1,16,1024]
    t2 = b2.new_input(t2_d, (0, 1, -1))  # [1,16,16]
    b2.new_output(b2.div(b2.accum_redtox(t1), b2.accum_sum(t2)), (0, 1, -1))
    g.mark_output(g.customized(b2)[0], "O")
    return g


def gqa_reference() -> KernelGraph:
    g, q, k, v = _attn_inputs()
    g.mark_output(_attention(g, q, k, v), "O")
    return g


def gqa_expert() -> KernelGraph:
    return _attention_expert(norm_q=False, norm_v=False)


def gqa_paper() -> KernelGraph:
    """The best GQA μGraph of Mirage's paper: K1 grid (2, 8, 16), 8 partial attentions of 512
    keys each over 16 row tiles of Q."""
    return _attention_expert(norm_q=False, norm_v=False, grid=(2, 8, 16))


def qknorm_gqa_reference() -> KernelGraph:
    g, q, k, v = _attn_inputs()
    g.mark_output(_attention(g, g.rms_norm(q), k, g.rms_norm(v)), "O")
    return g


def qknorm_gqa_expert() -> KernelGraph:
    return _attention_expert(norm_q=True, norm_v=True)


# -- nTrans (normalized transformer): H, X, alpha [8,4096] -----------------------------------------


def _ntrans_inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    h, x = g.new_input((8, 4096), name="H"), g.new_input((8, 4096), name="X")
    return g, h, x, g.new_input((8, 4096), name="alpha")


def ntrans_reference() -> KernelGraph:
    g, h, x, alpha = _ntrans_inputs()
    c = g.add(x, g.mul(alpha, g.add(g.rms_norm(h), x)))
    g.mark_output(g.rms_norm(c), "O")
    return g


def ntrans_expert() -> KernelGraph:
    """Saved structure (i): one row per block, everything in one block graph."""
    g, h_d, x_d, alpha_d = _ntrans_inputs()
    b = BlockGraph(grid=(8, 1, 1), forloop=1)
    h, x, alpha = (b.new_input(t, (0, -1, -1)) for t in (h_d, x_d, alpha_d))  # [1,4096]
    c = b.add(b.mul(b.add(x, b.rms_norm(h)), alpha), x)
    b.new_output(b.accum_no_red(b.rms_norm(c)), (0, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


register(
    Program(
        "rms_norm",
        "RMSNorm followed by a linear layer",
        "mlp",
        rms_norm_reference,
        {"expert": rms_norm_expert, "paper": rms_norm_paper},
    )
)
register(
    Program(
        "lora",
        "Low-rank adaptation: X·W + (X·A)·B",
        "lora",
        lora_reference,
        {"saved": lora_expert_saved, "concat": lora_expert_concat},
    )
)
register(
    Program("gated_mlp", "Gated MLP: silu(X·W1) * (X·W2)", "mlp", gated_mlp_reference, {"expert": gated_mlp_expert})
)
register(
    Program("gqa", "Group-query attention", "attention", gqa_reference, {"expert": gqa_expert, "paper": gqa_paper})
)
register(
    Program(
        "qknorm_gqa",
        "Group-query attention with RMS-normalised Q and V",
        "attention",
        qknorm_gqa_reference,
        {"expert": qknorm_gqa_expert},
    )
)
register(
    Program(
        "ntrans", "Normalized transformer (nGPT) residual update", "mlp", ntrans_reference, {"saved_i": ntrans_expert}
    )
)
