"""A norm's eps in abstract terms and in Z3: eps = 0 keeps Mirage's terms and query texts exactly;
another eps is another function, which the axioms neither confuse with it nor refute below it."""

from __future__ import annotations

import z3

from mugraph.ir.graph import KernelGraph
from mugraph.stages.prune.expr import output_exprs, parse
from mugraph.stages.prune.oracle import OracleConfig
from mugraph.stages.prune.z3_encoding import SubQueries, smt_term
from tests.helpers.norm_graphs import fused_rms_matmul, matmul_layer_norm, rms_matmul


def rms_program(eps: float) -> KernelGraph:
    return rms_matmul(eps, 16, 1024, 64)


def fused(eps: float) -> KernelGraph:
    return fused_rms_matmul(eps, 16, 1024, 64, grid=8, forloop=16)


def layer_norm_program(eps: float) -> KernelGraph:
    return matmul_layer_norm(eps, 16, 1024, 64)


def queries(eps: float, program: KernelGraph | None = None) -> SubQueries:
    cfg = OracleConfig()
    return SubQueries(output_exprs(program or rms_program(eps)), 2, cfg.rlimit, cfg.mbqi)


def test_eps_zero_keeps_mirages_terms_and_query_text() -> None:
    (e,) = output_exprs(rms_program(0.0))
    assert e.sexpr == "(sum 1024 (* (/ v0 (rms 1024 v0)) v1))"
    q = queries(0.0)
    assert "rms_eps" not in q.prologue and "layer_norm" not in q.prologue
    assert output_exprs(fused(0.0)) == [parse("(/ (sum 1024 (* v0 v1)) (rms 1024 v0))")]


def test_eps_tags_the_term_with_its_exact_bits() -> None:
    (a,), (b,), (c,) = (output_exprs(rms_program(eps)) for eps in (1e-6, 1e-5, 0.0))
    assert len({a.sexpr, b.sexpr, c.sexpr}) == 3
    assert parse(a.sexpr) is a  # verdicts and memo keys are keyed by the text, so it must parse back
    assert smt_term(a).count("(rms_eps 10 ") == 1
    (ln,) = output_exprs(layer_norm_program(1e-5))
    assert ln.sexpr.startswith("(layer_norm 64 ") and smt_term(ln).startswith("(layer_norm 64 ")


def test_the_fused_graph_with_the_same_eps_is_a_subexpression() -> None:
    """The fused μGraph's terms are subexpressions of the reference's output with the same eps, and
    its accum_rms is not one of the reference with another eps (or none)."""
    rms_with = output_exprs(fused(1e-6))[0].args[1]  # the accumulator's term
    assert queries(1e-6).check(rms_with) == "unsat"
    assert queries(0.0).check(rms_with) != "unsat"
    assert queries(1e-5).check(rms_with) != "unsat"
    assert queries(1e-6).check(output_exprs(fused(0.0))[0].args[1]) != "unsat"


def test_layer_norm_queries_declare_it_and_keep_its_argument() -> None:
    q = queries(1e-5, layer_norm_program(1e-5))
    assert "(declare-fun layer_norm (Int Int P) P)" in q.prologue
    (ln,) = output_exprs(layer_norm_program(1e-5))
    assert q.check(ln.args[0]) == "unsat"  # x ⊑ layer_norm(x)
    assert q.check(parse("(sum 1024 (* v0 v0))")) != "unsat"
    # a candidate using a head the reference lacks gets a prologue that declares it, and parses
    text = queries(0.0).text(ln)
    solver = z3.Solver(ctx=z3.Context())
    solver.from_string(text)
    assert "layer_norm" in text
