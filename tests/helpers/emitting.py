"""Helpers for the codegen tests: narrower versions of the two slowest experts in Triton's
interpreter (same tiles, fewer blocks and iterations), and emitting + checking in one call."""

from __future__ import annotations

import os

# Triton makes its language functions for the interpreter only if this is set when it is first imported.
os.environ.setdefault("TRITON_INTERPRET", "1")


from mugraph.codegen import CheckReport, EmitInfo, check_source, emit_module
from mugraph.ir.graph import BlockGraph, KernelGraph, Tensor
from mugraph.programs.registry import Program
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.describe import describe_layouts

NONE = (-1, -1, -1)


def _rms_inputs() -> tuple[KernelGraph, Tensor, Tensor]:
    g = KernelGraph()
    return g, g.new_input((16, 512), name="X"), g.new_input((512, 768), name="W")


def narrow_rms_norm_reference() -> KernelGraph:
    g, x, w = _rms_inputs()
    g.mark_output(g.matmul(g.rms_norm(x), w), "O")
    return g


def narrow_rms_norm_expert() -> KernelGraph:
    """The benchmark expert's block graph (tiles X [16,64], W [64,96]) on 8 blocks and 8 iterations."""
    g, x_d, w_d = _rms_inputs()
    b = BlockGraph(grid=(8, 1, 1), forloop=8)
    x = b.new_input(x_d, NONE, fmap=1)
    w = b.new_input(w_d, (1, -1, -1), fmap=0)
    b.new_output(b.div(b.accum_no_red(b.matmul(x, w)), b.accum_rms(x)), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def _mlp_inputs() -> tuple[KernelGraph, Tensor, Tensor, Tensor]:
    g = KernelGraph()
    return g, g.new_input((8, 512), name="X"), g.new_input((512, 512), name="W1"), g.new_input((512, 512), name="W2")


def narrow_gated_mlp_reference() -> KernelGraph:
    g, x, w1, w2 = _mlp_inputs()
    g.mark_output(g.mul(g.silu(g.matmul(x, w1)), g.matmul(x, w2)), "O")
    return g


def narrow_gated_mlp_expert() -> KernelGraph:
    """The benchmark expert's block graph (tiles X [8,64], W [64,64]) on 8 blocks and 8 iterations."""
    g, x_d, w1_d, w2_d = _mlp_inputs()
    b = BlockGraph(grid=(8, 1, 1), forloop=8)
    x = b.new_input(x_d, NONE, fmap=1)
    w1 = b.new_input(w1_d, (1, -1, -1), fmap=0)
    w2 = b.new_input(w2_d, (1, -1, -1), fmap=0)
    a1, a2 = b.accum_no_red(b.matmul(x, w1)), b.accum_no_red(b.matmul(x, w2))
    b.new_output(b.mul(b.silu(a1), a2), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


NARROW_PROGRAMS = {
    "rms_norm": Program("rms_norm", "narrowed", "mlp", narrow_rms_norm_reference, {"expert": narrow_rms_norm_expert}),
    "gated_mlp": Program(
        "gated_mlp", "narrowed", "mlp", narrow_gated_mlp_reference, {"expert": narrow_gated_mlp_expert}
    ),
}


def emit_and_check(graph: KernelGraph, reference: KernelGraph, name: str = "test") -> tuple[str, CheckReport]:
    """Emit with the layouts the layout stage chooses (as `mugraph emit` does), run, compare."""
    chosen = choose_layouts(graph).layouts
    source = emit_module(graph, EmitInfo(name, layouts=describe_layouts(graph, chosen), inner=chosen.kernel))
    return source, check_source(source, reference)
