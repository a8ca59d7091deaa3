"""Every op the IR has, at both levels, emitted and run in Triton's interpreter against the float64
interpreter of the same graph: small graphs that also take the paths the benchmarks do not (tile
extents that are not powers of two, a matmul with a dim of 1, a batched tl.dot, tiles of 4 dims, concat through
scratch memory, reductions inside a block, every accumulator, redtox)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from mugraph.codegen import FP16_TOLERANCE
from mugraph.codegen.emit_kernel import emit_kernel
from mugraph.ir.graph import BlockGraph, KernelGraph
from tests.helpers.emitting import emit_and_check

UNARIES = ["relu", "clamp", "gelu", "sqrt_square", "mul_scalar", "exp", "silu"]


def block_unary(kind: str) -> KernelGraph:
    """One unary op on X * 20 (values of a few units, where the functions bend), tile [24,24] padded
    to [32,32]."""
    g = KernelGraph()
    x_d = g.new_input((24, 48), name="X")
    b = BlockGraph(grid=(2, 1, 1), forloop=1)
    x = b.mul_scalar(b.new_input(x_d, (1, -1, -1)), 20.0)
    ops = {
        "relu": lambda: b.relu(x),
        "clamp": lambda: b.clamp(x, -0.5, 1.0),
        "gelu": lambda: b.gelu(x),
        "sqrt_square": lambda: b.sqrt(b.square(x)),
        "mul_scalar": lambda: b.mul_scalar(x, -3.0),
        "exp": lambda: b.exp(x),
        "silu": lambda: b.silu(x),
    }
    b.new_output(b.accum_no_red(ops[kind]()), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def block_reductions() -> KernelGraph:
    g = KernelGraph()
    x_d = g.new_input((24, 96), name="X")
    b = BlockGraph(grid=(1, 1, 1), forloop=2)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)  # [24,48] per iteration
    col = b.reduction(x, 0)  # [1,48]
    normed = b.rms_norm(x)
    b.new_output(b.div(b.accum_no_red(b.mul(normed, col)), b.accum_rms(x)), (-1, -1, -1))
    b.new_output(b.add(b.accum_mean(x), b.accum_sum(x)), (-1, -1, -1))
    o1, o2 = g.customized(b)
    g.mark_output(o1, "O1")
    g.mark_output(o2, "O2")
    return g


def block_concat_and_thin_matmul() -> KernelGraph:
    g = KernelGraph()
    a_d, c_d = g.new_input((1, 40), name="A"), g.new_input((1, 24), name="C")
    w_d, v_d = g.new_input((40, 32), name="W"), g.new_input((24, 32), name="V")
    b = BlockGraph(grid=(2, 1, 1), forloop=1)
    a, c = b.new_input(a_d, (-1, -1, -1)), b.new_input(c_d, (-1, -1, -1))
    w, v = b.new_input(w_d, (1, -1, -1)), b.new_input(v_d, (1, -1, -1))  # [40,16], [24,16]
    row = b.concat(a, c, 1)  # [1,64]: a matmul with M = 1 takes the broadcast-and-sum path
    b.new_output(b.accum_no_red(b.matmul(row, b.concat(w, v, 0))), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def block_thin_matmul(rank: int) -> KernelGraph:
    """A vector times a matrix (M = 1, under tl.dot's 16: the broadcast-and-sum path, K = 512) whose
    operands are loaded inputs read by nothing else (so held as fp16 tiles), beside a LoRA-style rank-8
    product (padded to 16: tl.dot), 2-d and batched."""
    g = KernelGraph()
    lead = (2,) if rank == 3 else ()
    a_d, w_d = g.new_input((*lead, 1, 512), name="A"), g.new_input((*lead, 512, 32), name="W")
    u_d, v_d = g.new_input((*lead, 32, 8), name="U"), g.new_input((*lead, 8, 32), name="V")
    b = BlockGraph(grid=(2, 1, 1), forloop=1)
    col = (2, -1, -1) if rank == 3 else (1, -1, -1)  # grid axis x splits the columns
    a, w = b.new_input(a_d, (-1, -1, -1)), b.new_input(w_d, col)  # [.., 1, 512] x [.., 512, 16]
    u, v = b.new_input(u_d, (-1, -1, -1)), b.new_input(v_d, col)  # [.., 32, 8] x [.., 8, 16]
    b.new_output(b.accum_no_red(b.matmul(a, w)), col)
    b.new_output(b.accum_no_red(b.matmul(u, v)), col)
    o1, o2 = g.customized(b)
    g.mark_output(o1, "O1")
    g.mark_output(o2, "O2")
    return g


def block_batched_dot_and_redtox() -> KernelGraph:
    g = KernelGraph()
    q_d, k_d = g.new_input((2, 32, 32), name="Q"), g.new_input((2, 32, 128), name="K")
    b = BlockGraph(grid=(1, 2, 1), forloop=2, rdx=16)
    q = b.new_input(q_d, (-1, 1, -1), fmap=2)  # [2,16,16]
    k = b.new_input(k_d, (-1, -1, -1), fmap=1)  # [2,16,128]
    b.new_output(b.accum_redtox(b.matmul(q, k)), (-1, 1, -1))  # [2,16,16] per block
    g.mark_output(g.customized(b)[0], "O")
    return g


def block_batched_4d() -> KernelGraph:
    """Tiles of 4 dims, as attention's [B, H, S, D] with its batch kept (a decode step: B = 1, one query
    row): a tl.dot over the merged batch dims, and a one-row product on the broadcast-and-sum path."""
    g = KernelGraph()
    q_d, k_d = g.new_input((2, 4, 16, 32), name="Q"), g.new_input((2, 4, 32, 16), name="K")
    a_d, w_d = g.new_input((1, 4, 1, 16), name="A"), g.new_input((1, 4, 16, 32), name="W")
    b = BlockGraph(grid=(2, 1, 1), forloop=1)
    heads = (1, -1, -1)  # grid axis x splits the heads: [2,2,16,32] x [2,2,32,16], [1,2,1,16] x [1,2,16,32]
    q, k = b.new_input(q_d, heads), b.new_input(k_d, heads)
    a, w = b.new_input(a_d, heads), b.new_input(w_d, heads)
    b.new_output(b.accum_no_red(b.matmul(q, k)), heads)
    b.new_output(b.accum_no_red(b.exp(b.matmul(a, w))), heads)
    o1, o2 = g.customized(b)
    g.mark_output(o1, "O1")
    g.mark_output(o2, "O2")
    return g


def kernel_ops() -> KernelGraph:
    g = KernelGraph()
    x, y = g.new_input((8, 24), name="X"), g.new_input((8, 16), name="Y")
    w = g.new_input((40, 8), name="W")
    xy = g.concat(x, y, 1)  # [8,40]
    h = g.add(g.relu(xy), g.clamp(xy, -0.02, 0.02))
    h = g.add(h, g.gelu(g.mul_scalar(xy, 20.0)))
    h = g.mul(h, g.sqrt(g.square(g.silu(xy))))
    s = g.reduction(g.exp(h), 1)  # [8,1]
    out = g.matmul(g.div(h, s), w)  # [8,8]
    g.mark_output(g.rms_norm(out), "O")
    return g


GRAPHS: dict[str, Callable[[], KernelGraph]] = {
    **{f"block_{k}": functools.partial(block_unary, k) for k in UNARIES},
    "block_reductions": block_reductions,
    "block_concat_and_thin_matmul": block_concat_and_thin_matmul,
    "block_thin_matmul_2d": functools.partial(block_thin_matmul, 2),
    "block_thin_matmul_3d": functools.partial(block_thin_matmul, 3),
    "block_batched_dot_and_redtox": block_batched_dot_and_redtox,
    "block_batched_4d": block_batched_4d,
    "kernel_ops": kernel_ops,
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_op_semantics_match_float64(name: str) -> None:
    graph = GRAPHS[name]()
    _, report = emit_and_check(graph, graph)
    assert report.ok and report.max_rel_err <= FP16_TOLERANCE, report


@pytest.mark.parametrize("rank", [2, 3])
def test_thin_matmul_multiplies_and_sums_in_float32(rank: int) -> None:
    """fp16 input tiles are widened before the broadcast product: its sum over a long contraction
    (K = 512 here) is a float32 sum, as tl.dot's out_dtype=tl.float32 is, not a chain of fp16 roundings."""
    graph = block_thin_matmul(rank)
    block = next(op.block for op in graph.ops if op.block is not None)
    lines = emit_kernel(block, "k", ["A", "W", "U", "V"]).lines
    products = [ln for ln in lines if "tl.sum(" in ln and "None]" in ln]
    assert len(products) == 1, lines  # the vector's product; the rank-8 one pads to tl.dot's 16
    assert products[0].count("h.to(tl.float32)") == 2, products
