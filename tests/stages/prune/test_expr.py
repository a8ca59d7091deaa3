"""Abstract expressions: hash-consing, canonical form, Mirage's rules per op."""

from __future__ import annotations

import subprocess
import sys

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.stages.prune.expr import Head, add, div, matmul, mul, output_exprs, red, rms, unary, var
from tests.helpers.builtin import PROGRAMS

v0, v1, v2 = var(0), var(1), var(2)


def test_hash_consing_and_commutative_order() -> None:
    assert add(v0, v1) is add(v1, v0)
    assert mul(add(v1, v0), v2) is mul(v2, add(v0, v1))
    assert div(v0, v1) is not div(v1, v0)
    assert add(v0, v1).sexpr == "(+ v0 v1)"


def test_nested_sums_merge_and_unit_sums_vanish() -> None:
    assert red(4, red(8, v0)) is red(32, v0)
    assert red(1, v0) is v0
    assert matmul(v0, v1, 64).sexpr == "(sum 64 (* v0 v1))"


def test_kernel_rules() -> None:
    g = KernelGraph()
    x, w = g.new_input((8, 64), name="X"), g.new_input((64, 32), name="W")
    g.mark_output(g.rms_norm(g.reduction(g.mul_scalar(g.square(g.matmul(x, w)), 0.5), 1)))
    (out,) = output_exprs(g)
    mm = matmul(v0, v1, 64)
    s = red(32, mul(mm, mm))
    assert out is div(s, rms(1, s))


def test_block_rules_accumulators() -> None:
    g = KernelGraph()
    x_d = g.new_input((4, 256), name="X")
    b = BlockGraph(grid=(4, 1, 1), forloop=4, rdx=16)
    x = b.new_input(x_d, (0, -1, -1), fmap=1)  # [1,64]
    e = b.exp(x)
    b.new_output(b.accum_sum(e), (0, -1, -1))
    b.new_output(b.accum_redtox(e), (0, -1, -1))
    t_sum, t_tox = g.customized(b)
    b2 = BlockGraph(grid=(4, 1, 1), forloop=1)
    b2.new_output(b2.accum_rms(b2.new_input(t_tox, (0, -1, -1))), (0, -1, -1))
    g.mark_output(t_sum)
    g.mark_output(g.customized(b2)[0])
    ex = unary(Head.EXP, v0)
    assert output_exprs(g) == [red(256, ex), rms(16, red(16, ex))]


def test_experts_have_the_reference_expression_where_mirage_says_so() -> None:
    """For lora (saved), gated_mlp and ntrans the fused graph computes literally the same term."""
    for name, label in (("lora", "saved"), ("gated_mlp", "expert"), ("ntrans", "saved_i")):
        prog = PROGRAMS[name]
        assert output_exprs(prog.experts[label]()) == output_exprs(prog.reference())


def test_canonical_text_is_the_same_in_another_process() -> None:
    code = (
        "from mugraph.programs import builtin_programs as b\n"
        "from mugraph.stages.prune.expr import output_exprs\n"
        "for n, p in b().items(): print(n, output_exprs(p.reference())[0].digest)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    here = "".join(f"{n} {output_exprs(p.reference())[0].digest}\n" for n, p in PROGRAMS.items())
    assert out == here
