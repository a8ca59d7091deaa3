"""Layout selection: every hard rule holds on every confirmed μGraph of the benchmarks, the solver's
optimum equals a brute-force minimum, user strides are kept, and the choice is deterministic."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter

import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, loads
from mugraph.ir.types import ACCUMULATORS, UNARY_OPS, OpKind
from mugraph.programs import builtin_programs
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.costs import WEIGHTS, Layouts, cost_terms, counts
from mugraph.stages.layout.facts import LayoutError, gather
from tests.helpers.layout_corpus import corpus

KEEPS_INNER = UNARY_OPS | ACCUMULATORS | {OpKind.REDUCTION, OpKind.RMS_NORM}


def rule_breaks(g: KernelGraph, lay: Layouts, io: dict[str, int] | None = None) -> list[str]:
    """The rules, checked straight on the graph (not through the module's own facts)."""
    io = io or {}
    out: list[str] = []

    def check_level(level: int, graph_ops: list, tensors: list) -> None:  # type: ignore[type-arg]
        def inner(i: int) -> int:
            return lay.kernel[i] if level < 0 else lay.blocks[level][i][0]

        for t in tensors:
            d = inner(t.index)
            if not 0 <= d < len(t.shape):
                out.append(f"{level}/{t.index}: innermost {d} out of range")
            if level >= 0:
                s = lay.blocks[level][t.index][1]
                if s != -1 and (s == d or not 0 <= s < len(t.shape)):
                    out.append(f"{level}/{t.index}: swizzle {s} with innermost {d}")
        for op in graph_ops:
            if op.kind is OpKind.MATMUL:
                for i in (*op.inputs, *op.outputs):
                    if inner(i) < len(tensors[i].shape) - 2:
                        out.append(f"{level}/{i}: matmul tensor innermost {inner(i)}")
            if op.kind in KEEPS_INNER and inner(op.inputs[0]) != inner(op.outputs[0]):
                out.append(f"{level}/{op.outputs[0]}: {op.kind} changed the innermost dim")

    check_level(-1, g.ops, g.tensors)
    for index, op in enumerate(g.ops):
        if op.block is not None:
            assert len(lay.blocks[index]) == len(op.block.tensors)
            check_level(index, op.block.ops, op.block.tensors)
        if op.kind in (OpKind.INPUT, OpKind.OUTPUT):
            t = g.tensors[op.outputs[0] if op.kind is OpKind.INPUT else op.inputs[0]]
            want = io.get(str(op.attr("name")), len(t.shape) - 1)
            if lay.kernel[t.index] != want:
                out.append(f"{op.attr('name')}: user innermost {want} not kept ({lay.kernel[t.index]})")
    assert len(lay.kernel) == len(g.tensors)
    return out


def test_corpus_covers_every_benchmark() -> None:
    per = Counter(p for p, src, _, _ in corpus() if src != "reference")
    assert per["rms_norm"] >= 100 and per["lora"] >= 3 and per["gqa"] >= 2 and per["gated_mlp"] >= 10
    assert {p for p, src, _, _ in corpus() if src.startswith("expert")} >= {
        "rms_norm",
        "lora",
        "gated_mlp",
        "gqa",
        "qknorm_gqa",
        "ntrans",
    }


def test_every_confirmed_mugraph_gets_layouts_obeying_every_rule() -> None:
    solved = 0
    for program, source, digest, text in corpus():
        g = loads(text)
        r = choose_layouts(g)
        assert rule_breaks(g, r.layouts) == [], (program, source, digest)
        assert r.objective == sum(r.terms.values()) == sum(cost_terms(gather(g), r.layouts).values())
        # never worse than the layout-unaware choice (row-major, nothing swizzled)
        assert r.objective <= sum(cost_terms(gather(g), Layouts.row_major(gather(g))).values())
        solved += 1
    assert solved == len(corpus()) >= 120


def _brute_force_minimum(g: KernelGraph) -> int:
    facts = gather(g)
    kernel_keys = sorted(k for k in facts.shapes if k[0] < 0)
    block_keys = sorted(k for k in facts.shapes if k[0] >= 0)

    def options(key: tuple[int, int]) -> list[tuple[int, int]]:
        n = len(facts.shapes[key])
        if key in facts.fixed:  # inputs and outputs: only the user's choice can pass the rules anyway
            return [(facts.fixed[key], -1)]
        if key[0] < 0:
            return [(d, -1) for d in range(n)]
        return [(d, s) for d in range(n) for s in [-1, *range(n)] if s != d]

    best = None
    for choice in itertools.product(*(options(k) for k in kernel_keys + block_keys)):
        by_key = dict(zip(kernel_keys + block_keys, choice, strict=True))
        blocks: dict[int, list[tuple[int, int]]] = {}
        for op, i in block_keys:
            blocks.setdefault(op, []).append(by_key[(op, i)])
        lay = Layouts(tuple(by_key[k][0] for k in kernel_keys), {op: tuple(v) for op, v in blocks.items()})
        if rule_breaks(g, lay):
            continue
        cost = sum(cost_terms(facts, lay).values())
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


def test_solver_optimum_equals_brute_force() -> None:
    g = builtin_programs()["rms_norm"].experts["expert"]()
    assert choose_layouts(g).objective == _brute_force_minimum(g)


def test_solver_optimum_equals_brute_force_on_small_searched_mugraphs() -> None:
    small = [loads(t) for p, s, _, t in corpus() if p == "rms_norm" and s.startswith("store")]
    small = [g for g in small if sum(len(op.block.tensors) for op in g.ops if op.block) <= 6][:3]
    assert small
    for g in small:
        assert choose_layouts(g).objective == _brute_force_minimum(g)


def test_rms_norm_expert_layouts_are_the_expected_trade_offs() -> None:
    """W's [64,96] tile is a matmul operand with 64 rows: a swizzle (1000) beats 1 KiB of padding;
    X's [16,64] tile has 16 rows: 256 bytes of padding beat a swizzle. The RMS accumulator reduces
    X's innermost dim, which is cheaper (4000) than giving up cp.async on X (20000)."""
    g = builtin_programs()["rms_norm"].experts["expert"]()
    r = choose_layouts(g)
    op = next(i for i, o in enumerate(g.ops) if o.block is not None)
    x_tile, w_tile = r.layouts.blocks[op][0], r.layouts.blocks[op][1]
    assert x_tile == (1, -1) and w_tile == (1, 0)
    c = counts(gather(g), r.layouts)
    assert c["swizzle"] == 1 and c["reduction_over_inner"] == 1 and c["no_async_copy"] == 0
    assert r.terms["swizzle"] == WEIGHTS["swizzle"]


def test_user_strides_are_kept() -> None:
    """W given column-major (dim 0 innermost): the device tensor keeps it, and W's tile follows it
    so that its copy stays contiguous."""
    g = builtin_programs()["rms_norm"].experts["expert"]()
    io = {"W": 0}
    r = choose_layouts(g, io)
    assert rule_breaks(g, r.layouts, io) == []
    assert r.layouts.kernel[1] == 0
    op = next(i for i, o in enumerate(g.ops) if o.block is not None)
    assert r.layouts.blocks[op][1][0] == 0
    assert counts(gather(g, io), r.layouts)["no_async_copy"] == 0


def test_impossible_strides_are_a_clear_error() -> None:
    g = builtin_programs()["gqa"].reference()
    with pytest.raises(LayoutError, match="no layout satisfies"):
        choose_layouts(g, {"K": 0})  # the batch dim of a matmul operand
    with pytest.raises(LayoutError, match="not a dim"):
        choose_layouts(g, {"Q": 5})


def test_layouts_are_deterministic_across_processes() -> None:
    g = builtin_programs()["qknorm_gqa"].experts["expert"]()
    first = choose_layouts(g)
    again = choose_layouts(loads(dumps(g)))
    assert first.layouts == again.layouts and first.terms == again.terms
    code = (
        "import json,sys; from mugraph.ir.serialize import loads; "
        "from mugraph.stages.layout.choose import choose_layouts; "
        "r = choose_layouts(loads(sys.stdin.read())); print(json.dumps(r.layouts.to_json()))"
    )
    out = subprocess.run([sys.executable, "-c", code], input=dumps(g), capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == first.layouts.to_json()


def test_layout_record_round_trips() -> None:
    g = builtin_programs()["lora"].experts["concat"]()
    r = choose_layouts(g)
    back = LayoutResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back.layouts == r.layouts and back.terms == r.terms and back.objective == r.objective
    with pytest.raises(LayoutError, match="schema"):
        LayoutResult.from_json({**r.to_json(), "schema": "other/9"})
    w = choose_layouts(builtin_programs()["rms_norm"].experts["expert"](), {"W": 0})
    assert LayoutResult.from_json(json.loads(json.dumps(w.to_json()))).io_layouts == {"W": 0}


def test_a_layout_task_reports_impossible_strides_as_a_record() -> None:
    from mugraph.pipeline.worker import layout_task

    rec = layout_task("d", dumps(builtin_programs()["gqa"].reference()), {"K": 0})
    assert "no layout satisfies" in rec["error"] and rec["io_layouts"] == {"K": 0}
    with pytest.raises(LayoutError, match="no layout satisfies"):
        LayoutResult.from_json(rec)
    ok = layout_task("d", dumps(builtin_programs()["gqa"].reference()))
    assert "error" not in ok and LayoutResult.from_json(ok).objective == ok["objective"]


def test_a_layout_task_leaves_out_what_no_kernel_can_be_written_for() -> None:
    """A μGraph the kernel writer cannot emit (here a reduction to 24 columns, not a power of two) is a
    record with an `error`, which keeps it out of the ranking as a μGraph no layout fits is kept: the
    run never chooses what no module could run."""
    from mugraph.ir.graph import BlockGraph, KernelGraph
    from mugraph.pipeline.worker import layout_task

    g = KernelGraph()
    q_d, k_d = g.new_input((2, 32, 32), name="Q"), g.new_input((2, 32, 96), name="K")
    b = BlockGraph(grid=(1, 2, 1), forloop=2, rdx=24)
    q = b.new_input(q_d, (-1, 1, -1), fmap=2)
    k = b.new_input(k_d, (-1, -1, -1), fmap=1)
    b.new_output(b.accum_redtox(b.matmul(q, k)), (-1, 1, -1))
    g.mark_output(g.customized(b)[0], "O")
    rec = layout_task("d", dumps(g))
    assert rec["error"].startswith("no Triton kernels can be written for it: accum_redtox of [2,16,96]"), rec
    with pytest.raises(LayoutError, match="no Triton kernels"):
        LayoutResult.from_json(rec)
