"""eps on rms_norm and accum_rms, and layer_norm: stored only when not 0, checked, carried through JSON."""

from __future__ import annotations

import json

import pytest

from mugraph.ir import BlockGraph, GraphStructureError, KernelGraph, OpKind, SchemaError, dumps, eps_of, loads
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.render import render
from tests.helpers.norm_graphs import fused_rms_matmul


def _rms(eps: float | None, dtype: str = "float16") -> KernelGraph:
    g = KernelGraph()
    x = g.new_input((16, 64), dtype, name="X")
    w = g.new_input((64, 32), dtype, name="W")
    g.mark_output(g.matmul(g.rms_norm(x) if eps is None else g.rms_norm(x, eps=eps), w), "O")
    return g


def _fused(eps: float) -> KernelGraph:
    return fused_rms_matmul(eps, 16, 64, 32, grid=2, forloop=4)


def test_eps_zero_is_the_graph_without_eps() -> None:
    """eps = 0 (or -0.0) stores nothing: the JSON, digest and canonical digest of every graph written
    before eps existed stay as they were."""
    plain = _rms(None)
    for eps in (0.0, -0.0, 0):
        g = _rms(eps)
        assert dumps(g) == dumps(plain) and "eps" not in dumps(g)
        assert canonical_digest(g) == canonical_digest(plain)
    assert "eps" not in dumps(_fused(0.0))


def test_eps_is_stored_and_survives_json() -> None:
    g = _rms(1e-6)
    (op,) = g.ops_of(OpKind.RMS_NORM)
    assert op.attrs == (("eps", 1e-6),) and eps_of(op) == 1e-6
    again = loads(dumps(g))
    assert dumps(again) == dumps(g)
    assert canonical_digest(g) != canonical_digest(_rms(None)) != canonical_digest(_rms(1e-5))
    assert "eps=1e-06" in render(g)
    fused = loads(dumps(_fused(1e-5)))
    (acc,) = [op for op in fused.ops_of(OpKind.CUSTOMIZED)[0].block.ops if op.kind is OpKind.ACCUM_RMS]  # type: ignore[union-attr]
    assert eps_of(acc) == 1e-5


def test_layer_norm_keeps_the_shape_and_its_eps() -> None:
    g = KernelGraph()
    x = g.new_input((4, 8, 24), name="X")
    y = g.layer_norm(x, eps=1e-5)
    assert y.shape == x.shape
    g.mark_output(y, "O")
    assert json.loads(dumps(g))["ops"][1] == {"kind": "layer_norm", "inputs": [0], "eps": 1e-5}
    assert dumps(loads(dumps(g))) == dumps(g)
    b = BlockGraph(grid=(4, 1, 1), forloop=2)
    t = b.new_input(x, (0, -1, -1), fmap=1)
    assert b.layer_norm(t).shape == t.shape


@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf"), True, "1e-6"])
def test_a_bad_eps_is_refused_in_one_line(eps: object) -> None:
    g = KernelGraph()
    x = g.new_input((4, 8), name="X")
    for build in (g.rms_norm, g.layer_norm):
        with pytest.raises(GraphStructureError, match=r"eps .* must be a finite number >= 0"):
            build(x, eps=eps)  # type: ignore[arg-type]


def test_only_accum_rms_takes_an_eps() -> None:
    g = KernelGraph()
    x_d = g.new_input((16, 64), name="X")
    b = BlockGraph(grid=(2, 1, 1), forloop=4)
    x = b.new_input(x_d, (-1, -1, -1), fmap=1)
    with pytest.raises(GraphStructureError, match="only accum_rms takes an eps"):
        b.forloop_accum(x, OpKind.ACCUM_SUM, eps=1e-6)
    assert b.forloop_accum(x, OpKind.ACCUM_RMS, eps=1e-6).shape == (16, 1)


def test_a_stored_bad_eps_names_its_field() -> None:
    obj = json.loads(dumps(_rms(1e-6)))
    obj["ops"][2]["eps"] = -1.0
    with pytest.raises(SchemaError, match=r"graph\.ops\[2\].*eps"):
        loads(json.dumps(obj))
    obj["ops"][2]["eps"] = "small"
    with pytest.raises(SchemaError, match=r"graph\.ops\[2\]\.eps: expected a number"):
        loads(json.dumps(obj))


# Every kind's position in OpKind, as searched spaces were recorded with: the search ranks ops by
# it, so a new kind goes after these and every recorded search tree keeps its order.
RECORDED_ORDER = [
    "input",
    "output",
    "matmul",
    "exp",
    "square",
    "sqrt",
    "mul_scalar",
    "silu",
    "gelu",
    "gelu_erf",
    "relu",
    "clamp",
    "add",
    "mul",
    "div",
    "reduction",
    "rms_norm",
    "concat",
    "customized",
    "accum_no_red",
    "accum_sum",
    "accum_mean",
    "accum_rms",
    "accum_redtox",
    "layer_norm",
]


def test_kinds_keep_their_recorded_positions() -> None:
    """layer_norm came after every kind before it; a later kind comes after it."""
    assert [k.value for k in list(OpKind)[: len(RECORDED_ORDER)]] == RECORDED_ORDER
