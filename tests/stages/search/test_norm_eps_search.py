"""The search offers the reference's norms with the reference's eps: rms_norm(X, eps) @ W finds the
same μGraphs, structure for structure, as with eps = 0 (eps does not shrink the space), each carrying
that eps; layer_norm(X @ W) finds a μGraph with the norm fused after the loop."""

from __future__ import annotations

import json
import re
from functools import cache

import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph, eps_of
from mugraph.ir.serialize import dumps, loads
from mugraph.ir.types import OpKind
from mugraph.stages.search.config import ConfigError, for_reference, preset_config, reference_eps
from mugraph.stages.search.explore import ExploreResult, Fragment, Searcher
from mugraph.stages.search.serial import run_search
from mugraph.stages.verify.confirm import Confirmer
from tests.helpers.norm_graphs import matmul_layer_norm, rms_matmul

EPS = 1e-6
NARROW = {"grids": [[8, 1, 1]], "franges": [4], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1], [0, -1, -1]]}


def rms_program(eps: float) -> KernelGraph:
    return rms_matmul(eps, 16, 256, 512)


def layer_norm_program(eps: float) -> KernelGraph:
    return matmul_layer_norm(eps, 16, 256, 512)


def fragment(reference: KernelGraph) -> Fragment:
    return Fragment(reference, preset_config("mlp").with_overrides(NARROW), "norm")


@cache
def searched(name: str, eps: float) -> tuple[Fragment, ExploreResult]:
    frag = fragment(rms_program(eps) if name == "rms" else layer_norm_program(eps))
    report = run_search(Searcher(frag), budget=2_000)
    assert report.complete
    return frag, ExploreResult((), report.found, [], report.counters)


def _norm_ops(g: KernelGraph) -> list[tuple[OpKind, float]]:
    ops = [op for op in g.ops if op.block is None] + [b for op in g.ops if op.block for b in op.block.ops]
    kinds = (OpKind.RMS_NORM, OpKind.ACCUM_RMS, OpKind.LAYER_NORM)
    return [(op.kind, eps_of(op)) for op in ops if op.kind in kinds]


def _without_eps(text: str) -> str:
    """The μGraph with every eps dropped: its structure."""

    def strip(v: object) -> object:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "eps"}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return canonical_digest(loads(json.dumps(strip(json.loads(text)))))


def test_eps_finds_what_eps_zero_finds_structure_for_structure() -> None:
    _, with_eps = searched("rms", EPS)
    _, without = searched("rms", 0.0)
    assert len(with_eps.found) == len(without.found) > 1
    assert with_eps.counters.nodes == without.counters.nodes
    assert sorted(_without_eps(f.graph) for f in with_eps.found.values()) == sorted(
        _without_eps(f.graph) for f in without.found.values()
    )
    assert sorted(f.path for f in with_eps.found.values()) == sorted(f.path for f in without.found.values())


def test_every_find_carries_the_references_eps_and_is_confirmed() -> None:
    frag, result = searched("rms", EPS)
    confirm = Confirmer(frag.reference, frag.digest)
    fused = 0
    for f in result.found.values():
        g = f.kernel_graph()
        norms = _norm_ops(g)
        assert norms and all(eps == EPS for _, eps in norms), norms
        fused += (OpKind.ACCUM_RMS, EPS) in norms
        assert confirm.confirm(g)["equivalent"]
    assert fused  # the expert's shape: accum_rms(X, eps) beside the matmul


def test_layer_norm_is_found_fused_and_confirmed() -> None:
    frag, result = searched("layer_norm", 1e-5)
    assert OpKind.LAYER_NORM in frag.config.block_ops and frag.config.layer_norm_eps == 1e-5
    confirm = Confirmer(frag.reference, frag.digest)
    fused = [
        g
        for g in (f.kernel_graph() for f in result.found.values())
        if any(b.kind is OpKind.LAYER_NORM for op in g.ops if op.block for b in op.block.ops)
    ]
    assert fused
    for g in fused:
        assert _norm_ops(g) == [(OpKind.LAYER_NORM, 1e-5)]
        assert confirm.confirm(g)["equivalent"]


def test_a_config_without_eps_keeps_its_json_and_digest() -> None:
    base = preset_config("mlp")
    assert "rms_eps" not in base.to_json() and "layer_norm_eps" not in base.to_json()
    assert for_reference(base, {OpKind.RMS_NORM, OpKind.MATMUL}, {}) is base
    with_eps = for_reference(base, {OpKind.RMS_NORM}, reference_eps(rms_program(EPS).ops))
    assert with_eps.rms_eps == EPS and with_eps.to_json()["rms_eps"] == EPS and with_eps.digest != base.digest
    assert base.with_overrides({"rms_eps": EPS}) == with_eps
    assert fragment(rms_program(0.0)).config == preset_config("mlp").with_overrides(NARROW)
    assert "eps" not in dumps(rms_program(0.0))


def test_an_eps_other_than_the_references_is_refused_by_name() -> None:
    """rms_eps set on an eps-free rms_norm (or layer_norm_eps on another eps) would give every norm the
    search makes another function than the reference's: nothing found, the search "finished"."""
    two = rms_program(EPS)
    two.mark_output(two.rms_norm(two.input_tensors[0], eps=1e-5), "O2")  # a second norm, another eps
    for reference, setting, said in (
        (rms_program(0.0), {"rms_eps": 1e-6}, "rms_eps=1e-06: the reference's rms_norm has eps 0.0, "),
        (rms_program(EPS), {"rms_eps": 1e-5}, "rms_eps=1e-05: the reference's rms_norm has eps 1e-06, "),
        (rms_program(EPS), {"rms_eps": 1.000001e-6}, "rms_eps=1.000001e-06: the reference's rms_norm has eps 1e-06, "),
        (two, {"rms_eps": 1e-5}, "rms_eps=1e-05: the reference's norms have eps 1e-06, 1e-05, "),
        (layer_norm_program(EPS), {"layer_norm_eps": 1e-3}, "layer_norm_eps=0.001: the reference's layer_norm has "),
    ):
        cfg = preset_config("mlp").with_overrides({**NARROW, **setting})
        with pytest.raises(ConfigError, match=re.escape(said)):
            Fragment(reference, cfg, "norm")
    # the reference's own eps, or the default 0, is taken; a norm-free reference ignores it
    Fragment(rms_program(EPS), preset_config("mlp").with_overrides({**NARROW, "rms_eps": EPS}), "norm")
    Fragment(layer_norm_program(EPS), preset_config("mlp").with_overrides({**NARROW, "rms_eps": 1e-3}), "norm")


def test_limits_no_grid_meets_are_refused() -> None:
    mlp = preset_config("mlp")
    for setting, words in (
        ({"grids": [[2048, 1, 1]]}, "has 2048 blocks; a kernel launches at most 1024"),
        ({"min_blocks": 2000}, "min_blocks 2000 is above max_blocks 1024"),
        ({"min_blocks": 64, "max_blocks": 32}, "min_blocks 64 is above max_blocks 32"),
        ({"min_blocks": 2000, "max_blocks": 4096}, "(a kernel launches at most 1024 blocks)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            mlp.with_overrides(setting)
    mlp.with_overrides({"grids": [[1024, 1, 1]], "min_blocks": 1024})
