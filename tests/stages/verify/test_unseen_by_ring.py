"""Wrong experts the ring Z_pq alone would pass: a clamp with other bounds (beyond every value the
float64 check draws) and a scale that differs from 1 by a multiple of pq over a power of two (the
same element of Z_pq). The first has a table of its own per pair of bounds; the second is left to
a float tolerance tight enough to see 7.5e-7."""

from __future__ import annotations

import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.check import check_equivalence

PQ = 227 * 113


def _clamped(lo: float, hi: float) -> KernelGraph:
    g = KernelGraph()
    x, w = g.new_input((16, 256), name="X"), g.new_input((256, 512), name="W")
    g.mark_output(g.clamp(g.matmul(x, w), lo, hi), "O")
    return g


@pytest.mark.parametrize("bounds", [(-1000.0, 1000.0), (-25.0, 25.0), (-100.0, 60000.0), (-30.0, 30.0)])
def test_a_clamp_with_other_bounds_is_refused(bounds: tuple[float, float]) -> None:
    """Not accepted: the fingerprints differ. Where no float drawn reaches either pair of bounds, float64
    agrees, and the verdict is UNDECIDED (refused, saying why it might be equivalent)."""
    r = check_equivalence(_clamped(-100.0, 100.0), _clamped(*bounds))
    assert not r.equivalent and r.reason.startswith("fingerprints differ"), r.reason


def test_a_clamp_with_the_same_bounds_is_accepted() -> None:
    r = check_equivalence(_clamped(-100.0, 100.0), _clamped(-100.0, 100.0))
    assert r.equivalent, r.reason
    assert check_equivalence(_clamped(0.0, 6.0), _clamped(-0.0, 6.0)).equivalent


def _scaled(c: float) -> KernelGraph:
    g = KernelGraph()
    x, w = g.new_input((16, 64), name="X"), g.new_input((64, 32), name="W")
    g.mark_output(g.mul_scalar(g.matmul(x, w), c), "O")
    return g


def test_a_scale_that_is_one_in_the_ring_is_refused_by_float64() -> None:
    wrong = 1 + PQ / 2**35  # 1 + 7.5e-7: 1 in Z_pq
    r = check_equivalence(_scaled(1.0), _scaled(wrong))
    assert not r.equivalent and "float64 relative error" in r.reason, r.reason
    assert check_equivalence(_scaled(0.5), _scaled(0.5)).equivalent


def test_a_stored_program_with_other_clamp_bounds_is_told_apart() -> None:
    """What `emit` and `load` check a store's program with: float64 alone passed a clamp whose bounds
    were edited past every value it drew, the ring does not."""
    from mugraph.stages.verify.stored import stored_program_differs

    assert stored_program_differs(_clamped(-100.0, 100.0), _clamped(-100.0, 100.0)) is None
    why = stored_program_differs(_clamped(-100.0, 100.0), _clamped(-1000.0, 1000.0))
    assert why is not None and "'O'" in why, why
    assert "relative error" in str(stored_program_differs(_scaled(1.0), _scaled(2.0)))
