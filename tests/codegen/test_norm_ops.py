"""Norms with eps, layer_norm and float32 programs emitted and run in Triton's interpreter against the
float64 interpreter: eps is in the kernels (they miss the reference without it), layer_norm's padded
lanes stay out of its mean and variance, and a float32 program searched, confirmed and emitted runs
within the float32 tolerance."""

from __future__ import annotations

import pytest

from mugraph.codegen import EmitInfo, emit_module
from mugraph.codegen.check import FP32_TOLERANCE, check_source
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import DType, OpKind
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search
from mugraph.stages.verify.confirm import Confirmer
from tests.helpers.emitting import emit_and_check
from tests.helpers.norm_graphs import fused_rms_matmul, rms_matmul

# The check's inputs are uniform in [-0.1, 0.1): mean(x²) is about 3e-3, so an eps of 1e-3 moves the
# result by tens of percent, far past the tolerance.
EPS = 1e-3


def rms_reference(eps: float, dtype: DType = DType.FLOAT16) -> KernelGraph:
    return rms_matmul(eps, 16, 96, 48, dtype)


def fused_rms(eps: float) -> KernelGraph:
    """accum_rms(x, eps) beside the matmul; tiles X [16,24] W [24,24]: padded to 32."""
    return fused_rms_matmul(eps, 16, 96, 48, grid=2, forloop=4)


def block_rms_norm(eps: float) -> KernelGraph:
    """rms_norm(x, eps) in the block on whole rows of X (tile [8,96], padded to 128)."""
    g = KernelGraph()
    x_d, w_d = g.new_input((16, 96), name="X"), g.new_input((96, 48), name="W")
    b = BlockGraph(grid=(2, 1, 1), forloop=1)
    x = b.new_input(x_d, (0, -1, -1))
    w = b.new_input(w_d, (-1, -1, -1))
    b.new_output(b.accum_no_red(b.matmul(b.rms_norm(x, eps=eps), w)), (0, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def layer_norm_reference(eps: float) -> KernelGraph:
    g = KernelGraph()
    x, w = g.new_input((16, 96), name="X"), g.new_input((96, 40), name="W")
    g.mark_output(g.layer_norm(g.mul_scalar(g.matmul(x, w), 4.0), eps=eps), "O")
    return g


def fused_layer_norm(eps: float) -> KernelGraph:
    """layer_norm after the loop on rows of X @ W (tile [8,40], padded to [8,64]: the padding must stay
    out of the mean and the variance)."""
    g = KernelGraph()
    x_d, w_d = g.new_input((16, 96), name="X"), g.new_input((96, 40), name="W")
    b = BlockGraph(grid=(2, 1, 1), forloop=4)
    x = b.new_input(x_d, (0, -1, -1), fmap=1)
    w = b.new_input(w_d, (-1, -1, -1), fmap=0)
    acc = b.accum_no_red(b.matmul(x, w))
    b.new_output(b.layer_norm(b.mul_scalar(acc, 4.0), eps=eps), (0, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


@pytest.mark.parametrize("graph", [rms_reference, fused_rms, block_rms_norm], ids=["kernel", "accum_rms", "block"])
def test_rms_norm_eps_is_in_the_kernels(graph: object) -> None:
    build = graph
    assert callable(build)
    source, report = emit_and_check(build(EPS), rms_reference(EPS), "rms_eps")
    assert report.ok, (report, source)
    assert repr(EPS) in source
    assert not check_source(source, rms_reference(0.0)).ok  # the eps really is there


@pytest.mark.parametrize("graph", [layer_norm_reference, fused_layer_norm], ids=["kernel", "block"])
def test_layer_norm_matches_the_interpreter(graph: object) -> None:
    build = graph
    assert callable(build)
    for eps in (0.0, 1e-2):
        source, report = emit_and_check(build(eps), layer_norm_reference(eps), "layer_norm")
        assert report.ok, (report, source)
    assert not check_source(source, layer_norm_reference(0.0)).ok


def test_a_float32_program_is_searched_confirmed_emitted_and_checked() -> None:
    """rms_norm(X, eps) @ W in float32: the search builds float32 candidates, the confirm stage accepts
    them, and the fused one emits float32 loads, stores and full-float32 tl.dot within FP32_TOLERANCE."""
    reference = rms_reference(EPS, DType.FLOAT32)
    narrow = {"grids": [[2, 1, 1]], "franges": [4], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]}
    frag = Fragment(reference, preset_config("mlp").with_overrides(narrow), "fp32")
    report = run_search(Searcher(frag), budget=2_000)
    assert report.complete and report.found
    confirm = Confirmer(reference, frag.digest)
    graphs = [f.kernel_graph() for f in report.found.values()]
    assert all(t.dtype is DType.FLOAT32 for g in graphs for t in g.tensors)
    fused = [g for g in graphs if any(b.kind is OpKind.ACCUM_RMS for op in g.ops if op.block for b in op.block.ops)]
    assert fused
    g = fused[0]
    assert confirm.confirm(g)["equivalent"]
    source, checked = emit_and_check(g, reference, "fp32")
    assert checked.ok and checked.tolerance == FP32_TOLERANCE, (checked, source)
    assert "DEVICE_DTYPE: Any = xp.float32" in source and "input_precision='ieee'" in source
    assert "input_precision='tf32'" in emit_module(g, EmitInfo("fp32", tf32=True))
