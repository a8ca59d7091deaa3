"""LAX fragments: the split of every built-in program, and stitching chosen μGraphs back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

import numpy as np
import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.serialize import digest, from_json, to_json
from mugraph.ir.types import OpKind
from mugraph.programs.benchmarks import NONE, lora_expert_saved, rms_norm_expert
from mugraph.programs.program import suggest_preset
from mugraph.programs.transformer import transformer_block_reference
from mugraph.stages.combine import stitch
from mugraph.stages.fragments import (
    EXP_BEARING_OPS,
    FragmentError,
    FragmentLimits,
    Split,
    split_program,
)
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import run_search
from mugraph.stages.verify.check import float_max_rel_err
from tests.helpers.builtin import PROGRAMS, reference

BENCHMARKS = ["gated_mlp", "gqa", "lora", "ntrans", "rms_norm"]
# qknorm_gqa has 7 compute ops (two rms_norms before the 5 of attention): over max_ops=5.
FIVE = FragmentLimits(max_ops=5)  # Mirage's kernel-op count: smaller fragments than the default 7


def renamed(graph: KernelGraph, names: Mapping[str, str]) -> KernelGraph:
    """`graph` with its outputs renamed (the search names a fragment's outputs o0, o1, ...)."""
    data = to_json(graph)
    for op in data["ops"]:
        if op["kind"] == "output":
            op["name"] = names.get(op["name"], op["name"])
    return from_json(data)


def rel_err(a: KernelGraph, b: KernelGraph) -> float:
    """float64 max relative error of b against a, outputs in order, inputs in [-1, 1)."""
    return float_max_rel_err(a, b, range(len(a.output_tensors)), np)


def exp_depth(graph: KernelGraph) -> int:
    depth: dict[int, int] = {}
    for op in graph.ops:
        if op.kind not in (OpKind.INPUT, OpKind.OUTPUT):
            d = max((depth.get(t, 0) for t in op.inputs), default=0) + (op.kind in EXP_BEARING_OPS)
            depth.update(dict.fromkeys(op.outputs, d))
    return max(depth.values(), default=0)


def compute_ops(graph: KernelGraph) -> list[str]:
    return [op.kind.value for op in graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]


def relu_program() -> KernelGraph:
    """rms_norm·W (the rms_norm benchmark), relu, then ·W2 + B: two LAX parts around a glue op."""
    g = KernelGraph()
    x, w = g.new_input((16, 4096), name="X"), g.new_input((4096, 6144), name="W")
    w2, b = g.new_input((6144, 64), name="W2"), g.new_input((16, 64), name="B")
    r = g.relu(g.matmul(g.rms_norm(x), w))
    g.mark_output(g.add(g.matmul(r, w2), b), "Y")
    return g


# -- splitting ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_is_one_fragment(name: str) -> None:
    program = reference(name)
    split = split_program(program)
    assert split.order == ("f0",) and split.glue == ()
    (f,) = split.fragments
    assert f.sources == tuple(n for n, _, _ in program.input_signature())
    assert f.outputs == ("o0",) and split.outputs == (("O", "f0:o0"),)
    assert canonical_digest(f.graph) == canonical_digest(program)
    assert digest(f.graph) == digest(renamed(program, {"O": "o0"}))  # the same JSON, outputs renamed


def test_qknorm_gqa_is_one_fragment_with_seven_ops_and_two_under_five() -> None:
    program = reference("qknorm_gqa")
    (f,) = split_program(program).fragments
    assert canonical_digest(f.graph) == canonical_digest(program)
    split = split_program(program, FIVE)
    assert [compute_ops(f.graph) for f in split.fragments] == [
        ["rms_norm", "rms_norm"],
        ["matmul", "exp", "reduction", "div", "matmul"],
    ]
    assert split.fragments[1].sources == ("f0:o0", "f0:o1", "K")


def test_transformer_block_split_under_the_defaults() -> None:
    """The gated MLP and its down projection are two fragments: as one (seven ops reading four
    inputs, silu(x·W1)·(x·W2) feeding a third matmul) no μGraph of the mlp or lora preset holds it."""
    split = split_program(transformer_block_reference())
    assert [compute_ops(f.graph) for f in split.fragments] == [
        ["rms_norm", "matmul", "matmul"],
        ["exp", "reduction", "div", "matmul", "matmul", "add"],
        ["rms_norm", "matmul", "silu", "matmul", "mul"],
        ["matmul", "add"],
    ]
    assert [f.sources for f in split.fragments] == [
        ("X", "Wq", "Kt"),
        ("f0:o0", "X", "V", "Wo"),  # what earlier fragments made first: activations before weights
        ("f1:o0", "W1", "W2"),
        ("f1:o0", "f2:o0", "W3"),
    ]
    assert split.outputs == (("O", "f3:o0"),)


def test_transformer_block_split_under_five_ops() -> None:
    program = transformer_block_reference()
    split = split_program(program, FIVE)
    assert split.order == ("f0", "f1", "f2", "f3") and split.glue == ()
    assert [compute_ops(f.graph) for f in split.fragments] == [
        ["rms_norm", "matmul", "matmul", "exp"],
        ["reduction", "div", "matmul", "matmul", "add"],
        ["rms_norm", "matmul", "silu", "matmul", "mul"],
        ["matmul", "add"],
    ]
    assert [f.sources for f in split.fragments] == [
        ("X", "Wq", "Kt"),
        ("f0:o0", "X", "V", "Wo"),  # what earlier fragments made first: activations before weights
        ("f1:o0", "W1", "W2"),
        ("f1:o0", "f2:o0", "W3"),
    ]
    assert all(f.outputs == ("o0",) for f in split.fragments)
    assert split.outputs == (("O", "f3:o0"),)
    for f in split.fragments:
        assert [n for n, _, _ in f.graph.input_signature()] == list(f.sources)
        assert len(compute_ops(f.graph)) <= FIVE.max_ops
        assert len(f.sources) <= FIVE.max_inputs and len(f.outputs) <= FIVE.max_outputs
        assert exp_depth(f.graph) <= 1


def test_transformer_block_is_a_builtin_program() -> None:
    prog = PROGRAMS["transformer_block"]
    assert prog.preset == "mlp" and prog.experts == {}
    assert digest(prog.reference()) == digest(transformer_block_reference())


def test_relu_is_glue_between_two_fragments() -> None:
    split = split_program(relu_program())
    assert split.order == ("f0", "g0", "f1")
    (g0,) = split.glue
    assert compute_ops(g0.graph) == ["relu"] and g0.sources == ("f0:o0",) and g0.outputs == ("o0",)
    f0, f1 = split.fragments
    assert f0.sources == ("X", "W") and f1.sources == ("g0:o0", "W2", "B")
    assert canonical_digest(f0.graph) == canonical_digest(reference("rms_norm"))


def test_a_later_fragments_matmul_by_a_weight_declared_first_still_fuses() -> None:
    """A norm, a relu (glue), then X·W + b with W [64, 96] and b declared before X: the second fragment
    reads the relu's output first. Read after the weights, Mirage's grid heuristic took W's dim 0 for
    the batch: grid 64 over W's rows alone, and no μGraph but the reference."""
    g = KernelGraph()
    w, b = g.new_input((64, 96), name="W"), g.new_input((1, 96), name="B")
    x = g.new_input((16, 64), name="X")
    g.mark_output(g.add(g.matmul(g.relu(g.layer_norm(x)), w), b), "O")
    f1 = split_program(g).fragments[1]
    assert f1.sources == ("g0:o0", "W", "B")
    found = run_search(Searcher(Fragment(f1.graph, preset_config("mlp"), "f1"))).found
    fused = [f for f in found.values() if f.kernel_graph().ops_of(OpKind.CUSTOMIZED)]
    assert len(found) > 1 and fused


def test_nested_exp_is_cut() -> None:
    g = KernelGraph()
    x = g.new_input((8, 64), name="X")
    g.mark_output(g.exp(g.silu(x)), "Y")
    split = split_program(g)
    assert [compute_ops(f.graph) for f in split.fragments] == [["silu"], ["exp"]]
    assert rel_err(g, stitch(split, {})) == 0.0


def test_dead_ops_are_dropped_and_inputs_kept() -> None:
    g = KernelGraph()
    x, unused = g.new_input((8, 64), name="X"), g.new_input((8, 64), name="U")
    g.exp(x)
    g.mark_output(g.square(x), "Y")
    g.mark_output(x, "X_again")
    split = split_program(g)
    assert [compute_ops(f.graph) for f in split.fragments] == [["square"]]
    assert split.outputs == (("Y", "f0:o0"), ("X_again", "X"))
    stitched = stitch(split, {})
    assert stitched.input_signature() == g.input_signature() and unused.index == 1
    assert rel_err(g, stitched) == 0.0


def test_two_outputs_of_one_fragment_are_ordered_by_tensor() -> None:
    g = KernelGraph()
    x, w = g.new_input((8, 64), name="X"), g.new_input((64, 64), name="W")
    m = g.matmul(x, w)
    s = g.square(m)
    g.mark_output(s, "S")
    g.mark_output(m, "M")
    (f,) = split_program(g).fragments
    assert f.outputs == ("o0", "o1")
    assert [t.shape for t in f.graph.output_tensors] == [(8, 64), (8, 64)]
    assert split_program(g).outputs == (("S", "f0:o1"), ("M", "f0:o0"))
    assert rel_err(g, stitch(split_program(g), {})) == 0.0


def test_splits_are_deterministic() -> None:
    def fingerprint(split: Split) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
        return [(f.name, digest(f.graph), f.sources, f.outputs) for f in split.parts]

    programs = [transformer_block_reference(), relu_program(), reference("qknorm_gqa")]
    first = [fingerprint(split_program(p)) for p in programs]
    assert first == [fingerprint(split_program(p)) for p in programs]
    code = (
        "import json; from mugraph.ir.serialize import digest\n"
        "from mugraph.programs.transformer import transformer_block_reference as t\n"
        "from mugraph.stages.fragments import split_program\n"
        "print(json.dumps([digest(f.graph) for f in split_program(t()).parts]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "4321"},
    )
    assert json.loads(proc.stdout) == [d for _, d, _, _ in first[0]]


def test_an_op_over_the_limits_alone_is_an_error() -> None:
    g = KernelGraph()
    x, w = g.new_input((8, 64), name="X"), g.new_input((64, 64), name="W")
    g.mark_output(g.matmul(x, w), "Y")
    with pytest.raises(FragmentError, match=r"op 2 \(matmul of \[8,64\], \[64,64\]\) alone.*max_inputs=1"):
        split_program(g, FragmentLimits(max_inputs=1))
    with pytest.raises(FragmentError, match="max_ops=0 must be a positive integer"):
        FragmentLimits(max_ops=0)


def test_a_fused_program_cannot_be_split() -> None:
    with pytest.raises(FragmentError, match="graph-defined"):
        split_program(lora_expert_saved())


# -- stitching ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*BENCHMARKS, "qknorm_gqa", "transformer_block"])
def test_stitching_the_references_gives_the_program(name: str) -> None:
    program = reference(name)
    stitched = stitch(split_program(program), {})
    assert stitched.input_signature() == program.input_signature()
    names = [op.attr("name") for op in program.ops_of(OpKind.OUTPUT)]
    assert [op.attr("name") for op in stitched.ops_of(OpKind.OUTPUT)] == names
    assert rel_err(program, stitched) < 1e-12


def test_stitching_the_relu_program_keeps_the_glue() -> None:
    program = relu_program()
    stitched = stitch(split_program(program), {})
    assert compute_ops(stitched) == compute_ops(program)
    assert rel_err(program, stitched) < 1e-12


def test_stitch_a_fused_lora() -> None:
    program = reference("lora")
    stitched = stitch(split_program(program), {"f0": renamed(lora_expert_saved(), {"O": "o0"})})
    assert [op.kind for op in stitched.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)] == [OpKind.CUSTOMIZED]
    assert rel_err(program, stitched) < 1e-9


def test_stitch_the_rms_norm_expert_into_the_relu_program() -> None:
    program = relu_program()
    stitched = stitch(split_program(program), {"f0": renamed(rms_norm_expert(), {"O": "o0"})})
    assert compute_ops(stitched) == ["customized", "relu", "matmul", "add"]
    assert rel_err(program, stitched) < 1e-9


def gated_mlp_part() -> KernelGraph:
    """Fragment f2 of transformer_block by hand: kernel rms_norm, then one fused gated MLP (inputs
    listed in another order than the fragment's: they bind by name)."""
    g = KernelGraph()
    h = g.new_input((16, 1024), name="f1:o0")
    w1_d, w2_d = g.new_input((1024, 2048), name="W1"), g.new_input((1024, 2048), name="W2")
    b = BlockGraph(grid=(64, 1, 1), forloop=16)
    x = b.new_input(g.rms_norm(h), NONE, fmap=1)  # [16,64]
    w1 = b.new_input(w1_d, (1, -1, -1), fmap=0)  # [64,32]
    w2 = b.new_input(w2_d, (1, -1, -1), fmap=0)
    b.new_output(b.mul(b.silu(b.accum_no_red(b.matmul(x, w1))), b.accum_no_red(b.matmul(x, w2))), (1, -1, -1))
    g.mark_output(g.customized(b)[0], "o0")
    return g


def test_stitch_a_fused_fragment_into_the_transformer_block() -> None:
    program = transformer_block_reference()
    split = split_program(program, FIVE)
    stitched = stitch(split, {"f2": gated_mlp_part()})
    assert compute_ops(stitched).count("customized") == 1
    assert rel_err(program, stitched) < 1e-9


def test_a_chosen_graph_that_does_not_fit_is_refused() -> None:
    split = split_program(reference("lora"))
    fused = renamed(lora_expert_saved(), {"O": "o0"})
    with pytest.raises(MugraphError, match=r"fragment f0 has outputs \['O'\]; the fragment's outputs are \['o0'\]"):
        stitch(split, {"f0": lora_expert_saved()})
    with pytest.raises(MugraphError, match=r"no fragment named \['f9'\]"):
        stitch(split, {"f9": fused})
    wrong_names = renamed(rms_norm_expert(), {"O": "o0"})
    with pytest.raises(MugraphError, match=r"fragment f0 does not fit: f0: the graph's inputs are \['X', 'W'\]"):
        stitch(split, {"f0": wrong_names})
    relu_split = split_program(relu_program())
    g = KernelGraph()
    x, w = g.new_input((16, 4096), name="X"), g.new_input((4096, 64), name="W")
    g.mark_output(g.matmul(g.rms_norm(x), w), "o0")
    with pytest.raises(MugraphError, match=r"input 'W' is \[4096,64\] float16, but the tensor given for it is \[4096,"):
        stitch(relu_split, {"f0": g})
    g = KernelGraph()
    x, w = g.new_input((16, 4096), name="X"), g.new_input((4096, 6144), name="W")
    g.mark_output(g.reduction(g.matmul(g.rms_norm(x), w), 1), "o0")
    with pytest.raises(MugraphError, match=r"its output 'o0' is \[16,1\] float16; the fragment's is \[16,6144\]"):
        stitch(relu_split, {"f0": g})


def prenorm_mlp(dim: int = 64, hidden: int = 128) -> KernelGraph:
    """A pre-norm MLP block as the torch lowering makes it: rms_norm(x)·w, linear, SiLU, linear, residual."""
    g = KernelGraph()
    x, w = g.new_input((16, dim), name="X"), g.new_input((1, dim), name="w")
    w1, w2 = g.new_input((dim, hidden), name="W1"), g.new_input((hidden, dim), name="W2")
    h = g.silu(g.matmul(g.mul(g.rms_norm(x, eps=1e-5), w), w1))
    g.mark_output(g.add(g.matmul(h, w2), x), "O")
    return g


def test_a_prenorm_mlp_is_cut_where_the_search_can_reach_both_parts() -> None:
    """The fewest-fragments rule alone made the whole block one fragment, whose space holds no μGraph
    (a linear fed by SiLU of a linear needs two block graphs); the reach rules cut it after the first
    linear, and the search finds μGraphs of each part (below: the first part)."""
    split = split_program(prenorm_mlp())
    assert [compute_ops(f.graph) for f in split.fragments] == [
        ["rms_norm", "mul", "matmul"],
        ["silu", "matmul", "add"],
    ]
    whole = split_program(prenorm_mlp(), FragmentLimits(reach=False))
    assert [compute_ops(f.graph) for f in whole.fragments] == [["rms_norm", "mul", "matmul", "silu", "matmul", "add"]]


def test_the_reach_limits_are_the_mlp_presets_capacity() -> None:
    """The split's bound mirrors the search's: kernel ops counting inputs, block ops in one block graph."""
    cfg, limits = preset_config("mlp"), FragmentLimits()
    assert (limits.kernel_ops, limits.block_ops) == (cfg.max_kernel_ops, cfg.max_block_ops)
    assert preset_config("lora").max_block_graphs == cfg.max_block_graphs == 1


def test_the_unreachable_whole_block_has_an_empty_space() -> None:
    """What the reach rules avoid: the whole pre-norm MLP as one fragment prunes every child of its root."""
    whole = split_program(prenorm_mlp(), FragmentLimits(reach=False)).fragments[0]
    report = run_search(Searcher(Fragment(whole.graph, preset_config("mlp"), "f0")), budget=2_000, time_limit=60)
    assert report.found == {} and report.frontier == []


def test_both_parts_of_a_prenorm_mlp_have_mugraphs() -> None:
    """The cut the reach rules make leaves two fragments the search fuses: a μGraph of each is found."""
    for part in split_program(prenorm_mlp()).fragments:
        searcher = Searcher(Fragment(part.graph, preset_config(suggest_preset(part.graph)), part.name))
        report = run_search(searcher, budget=2_000, stop=lambda r: bool(r.found))
        assert report.found, part.name


def llama_mlp_block(dim: int = 64, hidden: int = 128) -> KernelGraph:
    """Llama's RMSNorm + gated MLP + residual as the torch lowering makes it."""
    g = KernelGraph()
    x, w = g.new_input((16, dim), name="X"), g.new_input((1, dim), name="w")
    wg, wu = g.new_input((dim, hidden), name="Wg"), g.new_input((dim, hidden), name="Wu")
    wd = g.new_input((hidden, dim), name="Wd")
    h = g.mul(g.rms_norm(x, eps=1e-6), w)
    gated = g.mul(g.silu(g.matmul(h, wg)), g.matmul(h, wu))
    g.mark_output(g.add(g.matmul(gated, wd), x), "O")
    return g


def test_a_fragment_reading_four_inputs_is_priced_as_one_more() -> None:
    """Four inputs mean the lora preset's space (the largest): the split takes the gated MLP alone
    (three inputs, the built-in gated_mlp's shape) over a first fragment reading four."""
    split = split_program(llama_mlp_block())
    assert [compute_ops(f.graph) for f in split.fragments] == [
        ["rms_norm", "mul"],
        ["matmul", "silu", "matmul", "mul"],
        ["matmul", "add"],
    ]
    assert all(len(f.sources) <= 3 for f in split.fragments)
    unpriced = split_program(llama_mlp_block(), FragmentLimits(wide_inputs=99))
    assert [len(f.sources) for f in unpriced.fragments] == [4, 4]
