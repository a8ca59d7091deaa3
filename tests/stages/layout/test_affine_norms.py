"""A PyTorch model's norm with its weight and bias is one call where its code runs it (a fragment's
reference), three where a μGraph keeps the three ops (the module runs each as a torch call); a program
file's emitted module runs them apart either way, so `emitted-v2` does not change."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.programs import builtin_programs
from mugraph.stages.layout.affine_norms import affine_norms
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.emitted import (
    CONSTANTS,
    EMITTED,
    EMITTED_TORCH,
    EMITTED_TORCH_SEPARATE_AFFINE,
    TORCH_MODEL,
    TORCH_MODEL_SEPARATE_AFFINE,
    model_for,
    model_named,
    written_model,
)
from mugraph.stages.layout.profiles import PROFILES
from mugraph.stages.layout.rank import combined, confident, rank, rerank
from mugraph.stages.layout.rows import RankRow
from tests.helpers.layout_corpus import corpus, graph

H100 = PROFILES["H100"]
N, D = 16, 256


def _norm(
    kind: str = "layer_norm",
    weight: bool = True,
    bias: bool = True,
    shape: tuple[int, ...] = (1, D),
    rows: tuple[int, ...] = (N,),
) -> KernelGraph:
    """x -> norm -> * weight -> + bias -> output, as the torch lowering writes nn.LayerNorm."""
    g = KernelGraph()
    x = g.new_input((*rows, D), name="x")
    y = g.layer_norm(x, eps=1e-5) if kind == "layer_norm" else g.rms_norm(x, eps=1e-5)
    if weight:
        y = g.mul(y, g.new_input(shape, name="w"))
    if bias:
        y = g.add(y, g.new_input(shape, name="b"))
    g.mark_output(y, "out")
    return g


def _absorbed(g: KernelGraph) -> dict[str, list[str]]:
    return {str(g.ops[i].kind): [str(g.ops[j].kind) for j in f.absorbed] for i, f in affine_norms(g).items()}


@pytest.mark.parametrize(
    ("g", "want"),
    [
        (_norm(), {"layer_norm": ["mul", "add"]}),
        (_norm(bias=False), {"layer_norm": ["mul"]}),  # nn.LayerNorm(bias=False)
        (_norm(weight=False), {"layer_norm": ["add"]}),  # F.layer_norm(x, s, None, b)
        (_norm(weight=False, bias=False), {}),  # elementwise_affine=False: the norm alone
        (_norm("rms_norm", bias=False), {"rms_norm": ["mul"]}),  # nn.RMSNorm, F.rms_norm(x, s, w)
        (_norm("rms_norm"), {"rms_norm": ["mul"]}),  # F.rms_norm takes no bias: the add is a call of its own
        (_norm(shape=(1, 1, D), rows=(2, 8)), {"layer_norm": ["mul", "add"]}),  # a 3-d x
        (_norm(shape=(N, D)), {}),  # a full tensor, not a weight
        (_norm(shape=(N, 1)), {}),  # broadcast along the rows, not the last dim
    ],
    ids=[
        "ln",
        "ln-weight",
        "ln-bias",
        "ln-plain",
        "rms-weight",
        "rms-weight-bias",
        "3d",
        "full-tensor",
        "column",
    ],
)
def test_the_rule_takes_in_the_vectors_pytorch_s_norm_call_takes(g: KernelGraph, want: dict[str, list[str]]) -> None:
    assert _absorbed(g) == want


def _other_reader(g: KernelGraph, y: Tensor) -> None:
    g.mark_output(g.add(y, y), "also")


def _is_output(g: KernelGraph, y: Tensor) -> None:
    g.mark_output(y, "normed")


@pytest.mark.parametrize("read", [_other_reader, _is_output], ids=["another-reader", "a-graph-output"])
def test_a_norm_whose_output_is_read_elsewhere_keeps_its_weight_apart(
    read: Callable[[KernelGraph, Tensor], None],
) -> None:
    """PyTorch's norm call hands back only the scaled result: where the plain norm is read too, the
    model computes it apart."""
    g = KernelGraph()
    x, w = g.new_input((N, D), name="x"), g.new_input((1, D), name="w")
    y = g.layer_norm(x)
    read(g, y)
    g.mark_output(g.mul(y, w), "out")
    assert _absorbed(g) == {}


def test_a_norm_times_itself_is_no_weight() -> None:
    g = KernelGraph()
    y = g.rms_norm(g.new_input((1, D), name="x"))
    g.mark_output(g.mul(y, y), "out")
    assert _absorbed(g) == {}


def test_the_weight_after_the_bias_is_not_taken_in() -> None:
    """(norm + b) * w is not what F.layer_norm computes: the add is taken in, the mul runs apart."""
    g = KernelGraph()
    x, w, b = (g.new_input(s, name=n) for s, n in (((N, D), "x"), ((1, D), "w"), ((1, D), "b")))
    g.mark_output(g.mul(g.add(g.layer_norm(x), b), w), "out")
    assert _absorbed(g) == {"layer_norm": ["add"]}


def test_the_reference_is_priced_as_one_call_moving_the_vectors_once() -> None:
    g = _norm()
    written, op_by_op = EMITTED_TORCH.as_written().predict(g, None, H100), EMITTED_TORCH.predict(g, None, H100)
    assert (written["launches"], op_by_op["launches"]) == (1, 3)
    assert written["launch_seconds"] == pytest.approx(CONSTANTS.call_seconds)
    moved = (2 * N * D + 2 * D) * 2  # x in, the result out, the weight and bias in; fp16
    bandwidth = H100.dram_bytes_per_s * CONSTANTS.elementwise_efficiency
    assert written["estimated_seconds"] == pytest.approx(CONSTANTS.call_seconds + moved / bandwidth)
    assert written["model"] == op_by_op["model"] == TORCH_MODEL
    # an RMSNorm with a bias: the norm and its weight one call, the add another
    assert EMITTED_TORCH.as_written().predict(_norm("rms_norm"), None, H100)["launches"] == 2


def test_a_program_file_and_an_older_torch_store_price_the_reference_as_before() -> None:
    """`emitted-v2` prices each op as the emitted module's calls, as written or not; the torch model of
    stores ranked before (`emitted-v2-torch`) prices the reference's three ops as three calls."""
    graphs = [_norm(), _norm("rms_norm"), *(p.reference() for p in builtin_programs().values())]
    graphs += [graph(t) for _, _, _, t in corpus()]
    for g in graphs:
        assert EMITTED.as_written().predict(g, None, H100) == EMITTED.predict(g, None, H100)
        old = EMITTED_TORCH_SEPARATE_AFFINE
        assert old.as_written().predict(g, None, H100) == old.predict(g, None, H100)
    assert written_model(EMITTED) == EMITTED.as_written() and model_named(None) is EMITTED
    assert model_named(TORCH_MODEL_SEPARATE_AFFINE) is EMITTED_TORCH_SEPARATE_AFFINE
    assert model_named(TORCH_MODEL) is EMITTED_TORCH is model_for(True)


def test_the_reference_s_own_graph_ranks_below_the_reference_it_is() -> None:
    """The search finds the reference's own graph too; the module would run it op by op, so its row
    is the three calls' time, and the reference (one call) ranks ahead of it."""
    g = _norm()
    layout = choose_layouts(g)
    rows, ref_row = rank({"own": (g, layout)}, (g, layout), H100, EMITTED_TORCH)
    ref_row["digest"] = "own"
    (own,) = rows
    assert ref_row["emitted_launches"] == 1 and own["emitted_launches"] == 3
    assert own["speedup"] == pytest.approx(ref_row["estimated_seconds"] / own["estimated_seconds"])
    assert own["speedup"] < 0.4
    assert own["model"] == ref_row["model"] == TORCH_MODEL  # one model ranked the fragment: one name
    ordered = combined(rows, ref_row)
    assert [(r["digest"], r["reference"]) for r in ordered] == [("own", True), ("own", False)]
    # ranked again, as `show --gpu-profile` does: the same prices, from the name the rows carry
    again = rerank(ordered, {"own": g}, H100)
    prices = [(r["estimated_seconds"], r["speedup"]) for r in ordered]
    assert [(r["estimated_seconds"], r["speedup"]) for r in again] == prices


def test_a_store_ranked_before_reads_back_with_its_three_call_reference() -> None:
    g = _norm()
    layout = choose_layouts(g)
    rows, ref_row = rank({"own": (g, layout)}, (g, layout), H100, EMITTED_TORCH_SEPARATE_AFFINE)
    ref_row["digest"] = "own"
    assert ref_row["model"] == TORCH_MODEL_SEPARATE_AFFINE and ref_row["emitted_launches"] == 3
    again = rerank(combined(rows, ref_row), {"own": g}, PROFILES["A100"])
    reference = next(r for r in again if r["reference"])
    assert reference["model"] == TORCH_MODEL_SEPARATE_AFFINE and reference["emitted_launches"] == 3
    assert all(r["speedup"] == pytest.approx(1.0) for r in again)


def _like(row: RankRow, digest: str, seconds: float) -> RankRow:
    other = {k: v for k, v in row.items() if k != "kept_seconds"}
    return cast(RankRow, {**other, "digest": digest, "estimated_seconds": seconds})


def test_a_candidate_beating_what_a_kept_reference_runs_replaces_it() -> None:
    """Keeping a PyTorch reference runs its norm, mul and add as three calls: a fused kernel a little
    slower than the model's one call still beats that, and replaces it (its speedup below 1 says so);
    one within the model's error of the three calls does not."""
    g = _norm()
    layout = choose_layouts(g)
    _, ref_row = rank({}, (g, layout), H100, EMITTED_TORCH)
    ref_row["digest"] = "reference"
    kept = EMITTED_TORCH.price(g, None, H100)
    assert ref_row.get("kept_seconds") == kept and kept > 2.5 * ref_row["estimated_seconds"]
    fused = _like(ref_row, "fused", 1.07 * ref_row["estimated_seconds"])
    near = _like(ref_row, "near", kept / 1.05)
    assert confident(fused, ref_row) and not confident(near, ref_row)
    assert [r["digest"] for r in combined([fused, near], ref_row)] == ["fused", "reference", "near"]
    # a program file's module runs its reference as written: nothing kept apart, the fused kernel stays behind
    _, file_ref = rank({}, (g, layout), H100, EMITTED)
    assert "kept_seconds" not in file_ref
    assert not confident(_like(file_ref, "fused", 1.07 * file_ref["estimated_seconds"]), file_ref)
