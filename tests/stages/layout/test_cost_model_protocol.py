"""The ranking takes its cost model as an argument: today's model is one `CostModel`, and a second,
trivial one passed in orders the same candidates by its own estimate."""

from __future__ import annotations

import json
from functools import cache

import pytest

from mugraph.ir.families import PROPS, CostClass
from mugraph.ir.graph import KernelGraph
from mugraph.programs import builtin_programs
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.cost_model import CostModel, CostTerms
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.emitted import (
    CONSTANTS,
    EMITTED,
    EMITTED_TORCH,
    MODEL,
    TORCH_MODEL,
    estimate_emitted,
    model_for,
    model_named,
)
from mugraph.stages.layout.profiles import PROFILES, GpuProfile
from mugraph.stages.layout.rank import combined, rank, rerank
from mugraph.stages.layout.rows import RankRow
from tests.helpers.layout_corpus import corpus, graph


class KernelCount:
    """A model that prices a graph at one second per kernel it launches."""

    name = "kernel-count-v0"

    def predict(self, graph: KernelGraph, layouts: Layouts | None, profile: GpuProfile) -> CostTerms:
        n = sum(PROPS[op.kind].cost_class is not CostClass.FREE for op in graph.ops)
        return {
            "model": self.name,
            "estimated_seconds": float(n),
            "launches": n,
            "launch_seconds": 0.0,
            "serial_seconds": 0.0,
            "dram_seconds": 0.0,
            "waves": 0,
            "iterations": 0,
            "resident": 1,
            "spill_bytes": 0,
            "registers": 0,
        }

    def price(self, graph: KernelGraph, layouts: Layouts | None, profile: GpuProfile) -> float:
        return self.predict(graph, layouts, profile)["estimated_seconds"]


@cache
def _candidates() -> dict[str, tuple[KernelGraph, LayoutResult]]:
    return {d: (graph(t), choose_layouts(graph(t))) for p, s, d, t in corpus() if p == "rms_norm" and s != "reference"}


@cache
def _reference() -> tuple[KernelGraph, LayoutResult]:
    ref = builtin_programs()["rms_norm"].reference()
    return ref, choose_layouts(ref)


def test_the_emitted_model_is_a_cost_model_and_the_default() -> None:
    model: CostModel = EMITTED
    ref = _reference()[0]
    p = PROFILES["H100"]
    assert model.name == MODEL == "emitted-v2"
    assert model.price(ref, None, p) == estimate_emitted(ref, p).seconds
    assert model.predict(ref, None, p) == estimate_emitted(ref, p).terms()
    cands = _candidates()
    default = rank(cands, _reference(), p)
    explicit = rank(cands, _reference(), p, EMITTED)
    assert json.dumps(default) == json.dumps(explicit)


def test_a_second_model_passed_to_the_ranking_orders_by_its_own_estimate() -> None:
    ref = _reference()[0]
    cands = _candidates()
    p = PROFILES["H100"]
    emitted_rows, _ = rank(cands, _reference(), p)
    rows, ref_row = rank(cands, _reference(), p, KernelCount())
    kernels = {d: KernelCount().price(g, None, p) for d, (g, _) in cands.items()}
    assert [r["estimated_seconds"] for r in rows] == [kernels[r["digest"]] for r in rows]
    keys = [(not r["fits"], r["estimated_seconds"]) for r in rows]
    assert keys == sorted(keys)
    assert {r["model"] for r in rows} == {"kernel-count-v0"} and ref_row["model"] == "kernel-count-v0"
    assert ref_row["speedup"] == 1.0 and ref_row["estimated_seconds"] == KernelCount().price(ref, None, p)
    # the two models disagree on this corpus, so the order really came from the model passed in
    assert [r["digest"] for r in rows] != [r["digest"] for r in emitted_rows]


def test_every_term_of_a_cost_model_has_its_field_on_a_ranking_row() -> None:
    """A term added to `CostTerms` without its `emitted_*` field on `RankRow` fails here."""
    row_terms = {k.removeprefix("emitted_") for k in RankRow.__annotations__ if k.startswith("emitted_")}
    assert row_terms == set(CostTerms.__annotations__) - {"estimated_seconds"}


def test_the_pytorch_variant_prices_each_pre_defined_op_as_one_call() -> None:
    """A layer_norm is six array calls in the emitted module and one kernel in PyTorch; a stored row names
    its model, and ranking it again keeps that model."""
    g = KernelGraph()
    x, w = g.new_input((16, 256), name="X"), g.new_input((256, 64), name="W")
    g.mark_output(g.matmul(g.layer_norm(x), w), "O")
    emitted, torch_run = EMITTED.predict(g, None, PROFILES["H100"]), EMITTED_TORCH.predict(g, None, PROFILES["H100"])
    assert (emitted["model"], torch_run["model"]) == (MODEL, TORCH_MODEL)
    assert emitted["launch_seconds"] == pytest.approx(7 * CONSTANTS.call_seconds)  # six calls, and the matmul
    assert torch_run["launch_seconds"] == pytest.approx(2 * CONSTANTS.call_seconds)
    assert (
        model_named(TORCH_MODEL) is EMITTED_TORCH and model_named(None) is EMITTED and model_for(True) is EMITTED_TORCH
    )
    layout = choose_layouts(g)
    _, ref_row = rank({}, (g, layout), PROFILES["H100"], EMITTED_TORCH)
    ref_row["digest"] = "ref"
    again = rerank(combined([], ref_row), {"ref": g}, PROFILES["A100"])
    assert again[0]["model"] == TORCH_MODEL and again[0]["profile"] == "A100"
