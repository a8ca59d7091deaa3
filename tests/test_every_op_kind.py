"""Every op kind through every pass, so an op cannot be half-added: each computing `OpKind` is built
into a small graph at every level that allows it (a kernel graph, and a block graph inside a
graph-defined op), then taken through the abstract expression and its Z3 term (prune), the finite-field
and float64 interpreters (verify), the emitted Triton module run in Triton's interpreter against the
float64 interpreter (codegen), the layout facts and both cost models (layout), and the drawing
(dashboards). Each pass dispatches on the kind with one exhaustive `match` ending in `assert_never`, so
a kind dropped from a pass's match fails here at run time (and in mypy). The op kinds are walked from
the enum itself: a new kind with no builder here fails the first test until it is given one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from mugraph.dashboards.svg_graph import draw_mugraph
from mugraph.ir.families import PREDEFINED, Family, kinds_of
from mugraph.ir.graph import BlockGraph, KernelGraph, Op, Tensor
from mugraph.ir.types import ACCUMULATORS, OpKind
from mugraph.stages.layout.choose import choose_layouts
from mugraph.stages.layout.emitted import estimate_emitted
from mugraph.stages.layout.facts import gather
from mugraph.stages.layout.profiles import get_profile
from mugraph.stages.layout.roofline import estimate
from mugraph.stages.prune.expr import output_exprs
from mugraph.stages.prune.z3_encoding import smt_term
from mugraph.stages.verify.algebra import Float64Algebra, ZpqAlgebra
from mugraph.stages.verify.check import check_equivalence, field_inputs
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate
from mugraph.stages.verify.op_meanings import apply_common
from tests.helpers.emitting import emit_and_check

Builder = Callable[[KernelGraph | BlockGraph, Tensor, Tensor], Tensor]

# Kinds that describe the graph rather than compute: inputs, outputs, the graph-defined op itself.
STRUCTURAL = kinds_of(Family.BOUNDARY, Family.GRAPH_DEFINED)
SCALAR_ARGS: dict[OpKind, tuple[float, ...]] = {OpKind.MUL_SCALAR: (3.0,), OpKind.CLAMP: (-0.5, 1.0)}


def _unary(kind: OpKind) -> Builder:
    return lambda g, x, _y: getattr(g, kind.value)(x, *SCALAR_ARGS.get(kind, ()))


def _binary(kind: OpKind) -> Builder:
    return lambda g, x, y: getattr(g, kind.value)(x, y)


def builders() -> dict[OpKind, Builder]:
    """One way to apply each computing kind to two [R, C] operands (accumulators apart)."""
    out: dict[OpKind, Builder] = {k: _unary(k) for k in kinds_of(Family.UNARY)}
    out[OpKind.SQRT] = lambda g, x, _y: g.sqrt(g.square(x))  # real on every input
    out |= {k: _binary(k) for k in kinds_of(Family.BINARY)}
    out[OpKind.MATMUL] = lambda g, x, y: g.matmul(x, y)
    out[OpKind.REDUCTION] = lambda g, x, _y: g.reduction(x, 1)
    out[OpKind.RMS_NORM] = lambda g, x, _y: g.rms_norm(x)
    out[OpKind.LAYER_NORM] = lambda g, x, _y: g.layer_norm(x, eps=1e-5)
    out[OpKind.CONCAT] = lambda g, x, y: g.concat(x, y, 1)
    return out


def test_every_kind_is_built_here() -> None:
    """A kind added to the IR and not to this walk fails here, naming it."""
    covered = set(builders()) | ACCUMULATORS | STRUCTURAL
    assert set(OpKind) - covered == set()


def kernel_graph(kind: OpKind) -> KernelGraph:
    g = KernelGraph()
    x = g.new_input((16, 16), name="X")
    y = g.new_input((16, 16), name="Y")
    g.mark_output(builders()[kind](g, x, y), "O")
    return g


def block_graph(kind: OpKind) -> KernelGraph:
    """The kind inside a block graph of 2 blocks and 2 for-loop iterations ([8, 32] tiles), its result
    accumulated without reduction (or, for an accumulator kind, by that kind)."""
    g = KernelGraph()
    x_d = g.new_input((16, 64), name="X")
    y_d = g.new_input((16, 64) if kind is not OpKind.MATMUL else (64, 16), name="Y")
    b = BlockGraph(grid=(2, 1, 1), forloop=2, rdx=16)
    x = b.new_input(x_d, (0, -1, -1), fmap=1)
    y = b.new_input(y_d, (0, -1, -1), fmap=1) if kind is not OpKind.MATMUL else b.new_input(y_d, (-1, -1, -1), fmap=0)
    if kind in ACCUMULATORS:
        acc = b.forloop_accum(b.mul_scalar(x, 2.0), kind)
    else:
        acc = b.accum_no_red(builders()[kind](b, x, y))
    b.new_output(acc, (0, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def _levels() -> list[tuple[str, OpKind]]:
    """Every computing kind at the kernel level, and every one again (accumulators included) inside a
    block graph."""
    kinds = sorted(builders(), key=lambda k: k.value)  # one order in every process: xdist's workers compare it
    return [("kernel", k) for k in kinds] + [("block", k) for k in [*kinds, *sorted(ACCUMULATORS)]]


def graph_for(level: str, kind: OpKind) -> KernelGraph:
    return kernel_graph(kind) if level == "kernel" else block_graph(kind)


def inputs(g: KernelGraph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, size=shape) for _, shape, _ in g.input_signature()]


@pytest.mark.parametrize(("level", "kind"), _levels(), ids=lambda v: str(v))
def test_expression_and_z3_term(level: str, kind: OpKind) -> None:
    g = graph_for(level, kind)
    (e,) = output_exprs(g)
    assert smt_term(e)  # every head the expression uses has a Z3 encoding


@pytest.mark.parametrize(("level", "kind"), _levels(), ids=lambda v: str(v))
def test_float64_interpreter_agrees_across_levels(level: str, kind: OpKind) -> None:
    g = graph_for(level, kind)
    (out,) = evaluate(Float64Algebra(np), g, inputs(g))
    assert np.all(np.isfinite(out)) and out.size > 0


@pytest.mark.parametrize(("level", "kind"), _levels(), ids=lambda v: str(v))
def test_layout_facts_and_cost_models_price_it(level: str, kind: OpKind) -> None:
    g = graph_for(level, kind)
    facts = gather(g)
    assert facts.shapes and (facts.copies if level == "block" else facts.fixed)
    profile = get_profile("h100")
    priced = kind.value if level == "kernel" else OpKind.CUSTOMIZED.value  # the kernel that holds the kind
    roofline = estimate(g, choose_layouts(g).layouts, profile, facts)
    assert roofline.seconds > 0 and priced in {k.kind for k in roofline.kernels}
    emitted = estimate_emitted(g, profile)
    assert emitted.seconds > 0 and priced in {k.kind for k in emitted.kernels}


@pytest.mark.parametrize(("level", "kind"), _levels(), ids=lambda v: str(v))
def test_drawn_with_its_kind(level: str, kind: OpKind) -> None:
    assert f'data-kind="{kind.value}"' in draw_mugraph(graph_for(level, kind), f"{level} {kind}")


@pytest.mark.parametrize(("level", "kind"), _levels(), ids=lambda v: str(v))
def test_finite_field_fingerprints(level: str, kind: OpKind) -> None:
    g = graph_for(level, kind)
    spec = FieldSpec()
    case = field_inputs(g, spec, 3, np)
    (out,) = evaluate(ZpqAlgebra(np, spec, case.omega), g, list(case.inputs))
    (f64,) = evaluate(Float64Algebra(np), g, inputs(g))
    assert out.shape == f64.shape
    assert check_equivalence(g, g).equivalent  # fingerprints, fresh seeds and float64 agree with themselves


@pytest.mark.parametrize(("level", "kind"), _levels(), ids=lambda v: str(v))
def test_emitted_module_matches_the_interpreter(level: str, kind: OpKind) -> None:
    # Triton is the optional `kernels` extra: without it only this pass skips, every other one still runs.
    pytest.importorskip("triton", reason="needs Triton: pip install -e '.[kernels]'")
    g = graph_for(level, kind)
    source, report = emit_and_check(g, g, f"{level}_{kind.value}")
    assert report.ok, (report, source)


@pytest.mark.parametrize("kind", sorted(set(OpKind) - PREDEFINED), ids=str)
def test_a_single_op_pass_refuses_the_kinds_the_graph_walks_handle(kind: OpKind) -> None:
    """The passes that apply one op narrow to the pre-defined kinds first: a boundary, graph-defined
    op or accumulator reaching one is refused by name rather than computed."""
    with pytest.raises(NotImplementedError, match=f"{kind} is not applied here"):
        apply_common(Float64Algebra(np), Op(kind, (0,), (1,)), [np.ones((2, 2))], 2)
