"""A PyTorch model's matmul with its bias vector (`nn.Linear`, `F.linear`, `addmm`) is one call where its
code runs it (a fragment's reference) and where a μGraph keeps the two ops (the module runs them as
that call too); a program file's emitted module runs them apart, so `emitted-v2` does not change, nor
does any price of a graph with no such pair (the built-in programs'). Stores ranked by the torch model
before read back as they were ranked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mugraph.ir.affine_linear import linear_biases
from mugraph.ir.affine_norms import affine_norms
from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.types import DType
from mugraph.programs import builtin_programs
from mugraph.stages.fragments import split_program
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.emitted import (
    CONSTANTS,
    EMITTED,
    EMITTED_TORCH,
    EMITTED_TORCH_NORM_CALLS,
    TORCH_MODEL,
    TORCH_MODEL_NORM_CALLS,
    TORCH_MODEL_REFERENCE_NORMS,
    TORCH_MODEL_SEPARATE_AFFINE,
    model_for,
    model_named,
)
from mugraph.stages.layout.profiles import PROFILES
from mugraph.stages.layout.rank import combined, rank, rerank
from tests.helpers.layout_corpus import corpus, graph

H100 = PROFILES["H100"]
M, K, N = 64, 256, 128


def _linear(
    bias: tuple[int, ...] = (1, N), batch: tuple[int, ...] = (), bias_first: bool = False, dtype: DType = DType.FLOAT16
) -> KernelGraph:
    """x @ W.T + b -> output, as the torch lowering writes nn.Linear with a bias."""
    g = KernelGraph()
    x = g.new_input((*batch, M, K), dtype, name="x")
    w = g.new_input((*batch, K, N), dtype, name="w")
    b = g.new_input(bias, dtype, name="b")
    y = g.matmul(x, w)
    g.mark_output(g.add(b, y) if bias_first else g.add(y, b), "out")
    return g


def _pairs(g: KernelGraph) -> list[tuple[str, str]]:
    return [(str(g.ops[p.matmul].kind), str(g.ops[p.add].kind)) for p in linear_biases(g).values()]


@pytest.mark.parametrize(
    ("g", "fused"),
    [
        (_linear(), True),
        (_linear(bias_first=True), True),  # b + x @ W.T: the same add
        (_linear(dtype=DType.FLOAT32), True),
        (_linear(bias=(1, 1, N), batch=(1,)), True),  # a batch of one: a matrix product
        (_linear(bias=(1, 1, N), batch=(2,)), False),  # baddbmm copies the bias out first: two passes
        (_linear(bias=(M, N)), False),  # a full tensor, not a bias vector
        (_linear(bias=(M, 1)), False),  # broadcast along the columns, not the rows
    ],
    ids=["linear", "bias-first", "fp32", "batch-of-one", "batched", "full-tensor", "column"],
)
def test_the_rule_takes_in_the_bias_vector_pytorch_s_linear_call_takes(g: KernelGraph, fused: bool) -> None:
    assert _pairs(g) == ([("matmul", "add")] if fused else [])


def _other_reader(g: KernelGraph, y: Tensor) -> None:
    g.mark_output(g.mul(y, y), "also")


def _is_output(g: KernelGraph, y: Tensor) -> None:
    g.mark_output(y, "product")


@pytest.mark.parametrize("read", [_other_reader, _is_output], ids=["another-reader", "a-graph-output"])
def test_a_product_read_elsewhere_keeps_its_bias_apart(read: Callable[[KernelGraph, Tensor], None]) -> None:
    """PyTorch's call hands back only the biased result: where the product is read too, the model
    computes it apart, and so is it priced."""
    g = KernelGraph()
    x, w, b = g.new_input((M, K), name="x"), g.new_input((K, N), name="w"), g.new_input((1, N), name="b")
    y = g.matmul(x, w)
    read(g, y)
    g.mark_output(g.add(y, b), "out")
    assert _pairs(g) == []
    assert EMITTED_TORCH.predict(g, None, H100) == EMITTED_TORCH_NORM_CALLS.predict(g, None, H100) | {
        "model": TORCH_MODEL
    }


def test_a_product_plus_itself_is_no_bias() -> None:
    g = KernelGraph()
    y = g.matmul(g.new_input((M, K), name="x"), g.new_input((K, N), name="w"))
    g.mark_output(g.add(y, y), "out")
    assert _pairs(g) == []


def test_an_add_a_norm_took_in_is_not_claimed_again() -> None:
    """A one-row norm's bias add whose other operand is a one-row product: the norm's call takes the
    add (its rule first), and the product runs alone; and of two one-row products summed, one takes
    the add in, the other is its bias."""
    g = KernelGraph()
    x, w, b = g.new_input((1, K), name="x"), g.new_input((K, N), name="w"), g.new_input((1, N), name="v")
    g.mark_output(g.add(g.layer_norm(b), g.matmul(x, w)), "out")
    assert [len(c.absorbed) for c in affine_norms(g).values()] == [1]
    norm_add = next(i for c in affine_norms(g).values() for i in c.absorbed)
    assert len(linear_biases(g)) == 1  # the product's rule alone would take the add in
    assert linear_biases(g, {norm_add}) == {}
    assert EMITTED_TORCH.price(g, None, H100) == EMITTED_TORCH_NORM_CALLS.price(g, None, H100)  # norm call, matmul
    two = KernelGraph()
    x, w = two.new_input((1, K), name="x"), two.new_input((K, N), name="w")
    two.mark_output(two.add(two.matmul(x, w), two.matmul(x, w)), "out")
    assert len(linear_biases(two)) == 1 and EMITTED_TORCH.predict(two, None, H100)["launches"] == 2


@pytest.mark.parametrize("dtype", [DType.FLOAT16, DType.FLOAT32])
def test_a_matmul_with_its_bias_is_priced_as_one_call_moving_the_bias_once(dtype: DType) -> None:
    """In the reference and in a μGraph keeping the two ops alike: the module runs them as one call,
    which reads x, the weight and the bias and writes the result once, bound by its FLOPs."""
    g = _linear(dtype=dtype)
    written, kept = EMITTED_TORCH.as_written().predict(g, None, H100), EMITTED_TORCH.predict(g, None, H100)
    assert written == kept and kept["launches"] == 1 and kept["model"] == TORCH_MODEL
    moved = (M * K + K * N + N + M * N) * dtype.itemsize
    flops = 2 * M * N * K / (H100.simt_flops / 2 if dtype is DType.FLOAT32 else H100.tensor_flops)
    one_call = CONSTANTS.call_seconds + max(moved / (H100.dram_bytes_per_s * CONSTANTS.library_efficiency), flops)
    assert kept["estimated_seconds"] == pytest.approx(one_call, rel=1e-12)
    # the torch model before: the matmul, then the add over the whole output, a call of its own
    before = EMITTED_TORCH_NORM_CALLS.as_written().predict(g, None, H100)
    assert before["launches"] == 2 and before["estimated_seconds"] > kept["estimated_seconds"] + CONSTANTS.call_seconds
    # a program file's emitted module runs the two apart: emitted-v2 prices them so
    assert EMITTED.predict(g, None, H100)["launches"] == 2


def test_no_graph_without_a_bias_add_changes_price() -> None:
    """The built-in programs (references, fragments, the layout corpus's μGraphs) have no matmul with a
    bias vector: the new torch model prices each as the one before it did, term for term, so their
    rankings stand."""
    graphs = [p.reference() for p in builtin_programs().values()]
    graphs += [spec.graph for g in list(graphs) for spec in split_program(g).fragments]
    graphs += [graph(t) for _, _, _, t in corpus()]
    for g in graphs:
        assert linear_biases(g) == {}
        for written in (False, True):
            new = (EMITTED_TORCH.as_written() if written else EMITTED_TORCH).predict(g, None, H100)
            old = (EMITTED_TORCH_NORM_CALLS.as_written() if written else EMITTED_TORCH_NORM_CALLS).predict(
                g, None, H100
            )
            assert new == old | {"model": TORCH_MODEL}


def test_the_names_say_which_model_ranked_a_store() -> None:
    assert model_named(TORCH_MODEL) is EMITTED_TORCH is model_for(True)
    assert model_named(TORCH_MODEL_NORM_CALLS) is EMITTED_TORCH_NORM_CALLS
    names = {TORCH_MODEL, TORCH_MODEL_NORM_CALLS, TORCH_MODEL_REFERENCE_NORMS, TORCH_MODEL_SEPARATE_AFFINE}
    assert len(names) == 4


def test_a_store_ranked_before_reads_back_with_the_bias_add_a_call_of_its_own() -> None:
    g = _linear()
    layout = choose_layouts(g)
    for model, launches in ((EMITTED_TORCH_NORM_CALLS, 2), (EMITTED_TORCH, 1)):
        rows, ref_row = rank({"own": (g, layout)}, (g, layout), H100, model)
        ref_row["digest"] = "own"
        again = rerank(combined(rows, ref_row), {"own": g}, PROFILES["A100"])
        assert {(r["model"], r["emitted_launches"]) for r in again} == {(model.name, launches)}
