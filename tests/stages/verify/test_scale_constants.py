"""A scale split across operands (d^-1/4 on Q and on K for the program's d^-1/2 once) is right in real
numbers but not in the ring, which computes with each rounded float exactly: the verdict is UNDECIDED,
and it says that the constants are rounded and to write the scale once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.programs import load_program
from mugraph.stages.verify.check import UNSEEN, check_equivalence
from mugraph.stages.verify.constants import is_rounded, scale_constants, scale_hint

ATTENTION = Path(__file__).parents[2] / "programs" / "files" / "attention_scale.py"
pytestmark = pytest.mark.unit


def test_a_split_scale_is_undecided_and_told_to_be_written_once() -> None:
    prog = load_program(ATTENTION)
    reference = prog.reference()
    split = check_equivalence(reference, prog.experts["split"]())
    assert not split.equivalent and split.undecided
    assert split.float_max_rel_err is not None and split.float_max_rel_err < 1e-12
    reason = split.reason
    assert "the scale constants differ (the expert's 0.35355339 x2, the program's 0.125)" in reason, reason
    assert "constants such as fractional powers are rounded to float64" in reason
    assert "a scale split across operands" in reason
    assert reason.endswith("write the scale once, as the program does; it is not accepted"), reason
    assert check_equivalence(reference, prog.experts["once"]()).equivalent


def test_constants_of_block_graphs_count_and_short_fractions_are_exact() -> None:
    assert is_rounded(64**-0.25) and is_rounded(0.1) and is_rounded(2**-0.5)
    assert not any(is_rounded(c) for c in (0.125, 1.5, 3 / 1024, 100.0, -0.75, 0.0))
    g = KernelGraph()
    x = g.new_input((16, 64), name="X")
    b = BlockGraph(grid=(4, 1, 1), forloop=1)
    b.new_output(b.accum_no_red(b.mul_scalar(b.new_input(x, (0, -1, -1)), 0.1)), (0, -1, -1))
    (h,) = g.customized(b)
    g.mark_output(g.mul_scalar(g.mul_scalar(h, 0.1), 0.5), "O")
    assert scale_constants(g) == Counter({0.1: 2, 0.5: 1})


def _norms(factor_outside: float | None, factor_inside: float | None) -> KernelGraph:
    g = KernelGraph()
    s = g.reduction(g.square(g.new_input((16, 64), name="X")), 1)
    s = s if factor_inside is None else g.mul_scalar(s, factor_inside)
    r = g.sqrt(s)
    g.mark_output(r if factor_outside is None else g.mul_scalar(r, factor_outside), "O")
    return g


def test_exact_constants_that_differ_keep_the_general_reason() -> None:
    """1/64 inside a sqrt against 1/8 outside it: both exact, so the constants are not the cause (sqrt
    is), and the verdict gives the general reason."""
    reference, expert = _norms(None, 1 / 64), _norms(1 / 8, None)
    assert scale_hint(reference, expert) is None
    r = check_equivalence(reference, expert)
    assert r.undecided and r.reason.endswith(UNSEEN), r.reason
    rounded = _norms(None, 0.1)  # a rounded constant that differs: named
    assert "the program's 0.1" in str(scale_hint(rounded, _norms(None, None)))
