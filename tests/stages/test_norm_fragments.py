"""Norms with eps in a float32 program: split into fragments (layer_norm is LAX) and stitched back,
every eps and dtype kept."""

from __future__ import annotations

from mugraph.ir.graph import KernelGraph, eps_of
from mugraph.ir.serialize import dumps
from mugraph.ir.types import DType, OpKind
from mugraph.stages.combine import stitch
from mugraph.stages.fragments import split_program
from mugraph.stages.verify.check import check_equivalence


def program() -> KernelGraph:
    """layer_norm → matmul → relu (glue) → rms_norm → matmul, in float32."""
    g = KernelGraph()
    x = g.new_input((8, 64), DType.FLOAT32, name="X")
    w1 = g.new_input((64, 64), DType.FLOAT32, name="W1")
    w2 = g.new_input((64, 32), DType.FLOAT32, name="W2")
    h = g.relu(g.matmul(g.layer_norm(x, eps=1e-5), w1))
    g.mark_output(g.matmul(g.rms_norm(h, eps=1e-6), w2), "O")
    return g


def test_norms_split_as_lax_and_stitch_back_with_their_eps() -> None:
    ref = program()
    split = split_program(ref)
    assert len(split.fragments) == 2 and [g.graph.ops[-2].kind for g in split.glue] == [OpKind.RELU]
    norms = {
        op.kind: eps_of(op)
        for f in split.fragments
        for op in f.graph.ops
        if op.kind in (OpKind.RMS_NORM, OpKind.LAYER_NORM)
    }
    assert norms == {OpKind.LAYER_NORM: 1e-5, OpKind.RMS_NORM: 1e-6}
    assert all(t.dtype is DType.FLOAT32 for f in split.fragments for t in f.graph.tensors)
    back = stitch(split, {})
    assert dumps(back).count('"eps"') == 2
    assert check_equivalence(ref, back).equivalent
