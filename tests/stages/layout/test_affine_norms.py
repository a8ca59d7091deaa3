"""A PyTorch model's norm with its weight and bias is one call where its code runs it (a fragment's
reference) and where a μGraph keeps the three ops (the module runs them as that call too); a program
file's emitted module runs them apart either way, so `emitted-v2` does not change. Stores ranked by the
torch models before read back as they were ranked."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from mugraph.ir.affine_norms import affine_norms
from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.programs import builtin_programs
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.emitted import (
    CONSTANTS,
    EMITTED,
    EMITTED_TORCH,
    EMITTED_TORCH_REFERENCE_NORMS,
    EMITTED_TORCH_SEPARATE_AFFINE,
    TORCH_MODEL,
    TORCH_MODEL_REFERENCE_NORMS,
    TORCH_MODEL_SEPARATE_AFFINE,
    EmittedModel,
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


def test_a_norm_with_its_weight_and_bias_is_priced_as_one_call_moving_the_vectors_once() -> None:
    """In the reference and in a μGraph keeping the three ops alike: the module runs them as one call."""
    g = _norm()
    written, kept = EMITTED_TORCH.as_written().predict(g, None, H100), EMITTED_TORCH.predict(g, None, H100)
    assert written == kept and kept["launches"] == 1
    assert kept["launch_seconds"] == pytest.approx(CONSTANTS.call_seconds)
    moved = (2 * N * D + 2 * D) * 2  # x in, the result out, the weight and bias in; fp16
    bandwidth = H100.dram_bytes_per_s * CONSTANTS.elementwise_efficiency
    assert kept["estimated_seconds"] == pytest.approx(CONSTANTS.call_seconds + moved / bandwidth)
    assert kept["model"] == TORCH_MODEL
    # an RMSNorm with a bias: the norm and its weight one call, the add another
    assert EMITTED_TORCH.predict(_norm("rms_norm"), None, H100)["launches"] == 2
    # the older torch model (stores ranked by it read back as they were): one call in the reference alone
    old = EMITTED_TORCH_REFERENCE_NORMS
    assert (old.as_written().predict(g, None, H100)["launches"], old.predict(g, None, H100)["launches"]) == (1, 3)
    assert old.as_written().price(g, None, H100) == EMITTED_TORCH.price(g, None, H100)


def test_a_program_file_and_an_older_torch_store_price_the_reference_as_before() -> None:
    """`emitted-v2` prices each op as the emitted module's calls, as written or not; the torch model of
    stores ranked before (`emitted-v2-torch`) prices the reference's three ops as three calls."""
    graphs = [_norm(), _norm("rms_norm"), *(p.reference() for p in builtin_programs().values())]
    graphs += [graph(t) for _, _, _, t in corpus()]
    for g in graphs:
        assert EMITTED.as_written().predict(g, None, H100) == EMITTED.predict(g, None, H100)
        old = EMITTED_TORCH_SEPARATE_AFFINE
        assert old.as_written().predict(g, None, H100) == old.predict(g, None, H100)
        assert EMITTED_TORCH.as_written().predict(g, None, H100) == EMITTED_TORCH.predict(g, None, H100)
    assert written_model(EMITTED) == EMITTED.as_written() and model_named(None) is EMITTED
    assert model_named(TORCH_MODEL_SEPARATE_AFFINE) is EMITTED_TORCH_SEPARATE_AFFINE
    assert model_named(TORCH_MODEL_REFERENCE_NORMS) is EMITTED_TORCH_REFERENCE_NORMS
    assert model_named(TORCH_MODEL) is EMITTED_TORCH is model_for(True)
    assert len({TORCH_MODEL, TORCH_MODEL_REFERENCE_NORMS, TORCH_MODEL_SEPARATE_AFFINE}) == 3


def test_the_reference_s_own_graph_is_priced_as_the_reference() -> None:
    """The search finds the reference's own graph too; the module runs it as it runs the reference
    (the norm with its weight and bias one call), so it is no faster, and the reference stays ahead."""
    g = _norm()
    layout = choose_layouts(g)
    rows, ref_row = rank({"own": (g, layout)}, (g, layout), H100, EMITTED_TORCH)
    ref_row["digest"] = "own"
    (own,) = rows
    assert ref_row["emitted_launches"] == own["emitted_launches"] == 1
    assert own["speedup"] == pytest.approx(1.0) and "kept_seconds" not in ref_row
    assert own["model"] == ref_row["model"] == TORCH_MODEL  # one model ranked the fragment: one name
    ordered = combined(rows, ref_row)
    assert [(r["digest"], r["reference"]) for r in ordered] == [("own", True), ("own", False)]
    # ranked again, as `show --gpu-profile` does: the same prices, from the name the rows carry
    again = rerank(ordered, {"own": g}, H100)
    prices = [(r["estimated_seconds"], r["speedup"]) for r in ordered]
    assert [(r["estimated_seconds"], r["speedup"]) for r in again] == prices


@pytest.mark.parametrize(
    ("model", "launches"),
    [(EMITTED_TORCH_SEPARATE_AFFINE, (3, 3)), (EMITTED_TORCH_REFERENCE_NORMS, (1, 3))],
    ids=["three-calls", "reference-norms"],
)
def test_a_store_ranked_before_reads_back_as_it_was_ranked(model: EmittedModel, launches: tuple[int, int]) -> None:
    g = _norm()
    layout = choose_layouts(g)
    rows, ref_row = rank({"own": (g, layout)}, (g, layout), H100, model)
    ref_row["digest"] = "own"
    assert ref_row["model"] == model.name and (ref_row["emitted_launches"], rows[0]["emitted_launches"]) == launches
    again = rerank(combined(rows, ref_row), {"own": g}, PROFILES["A100"])
    reference = next(r for r in again if r["reference"])
    own = next(r for r in again if not r["reference"])
    assert reference["model"] == model.name and (reference["emitted_launches"], own["emitted_launches"]) == launches


def test_a_fused_kernel_slower_than_the_model_s_one_call_does_not_replace_it() -> None:
    """Keeping a PyTorch reference runs its norm, mul and add as the model does, one call: a fused
    kernel a little slower than that call stays behind the reference."""
    g = _norm()
    layout = choose_layouts(g)
    _, ref_row = rank({}, (g, layout), H100, EMITTED_TORCH)
    ref_row["digest"] = "reference"
    fused = cast(RankRow, {**ref_row, "digest": "fused", "estimated_seconds": 1.07 * ref_row["estimated_seconds"]})
    faster = cast(RankRow, {**ref_row, "digest": "faster", "estimated_seconds": ref_row["estimated_seconds"] / 1.5})
    assert not confident(fused, ref_row) and confident(faster, ref_row)
    assert [r["digest"] for r in combined([fused, faster], ref_row)] == ["faster", "reference", "fused"]
