"""The confirm stage: fresh seeds, the experts pass, a near miss fails."""

from __future__ import annotations

from mugraph.ir.graph import KernelGraph
from mugraph.programs.benchmarks import lora_expert_saved, lora_reference
from mugraph.stages.verify.confirm import Confirmer, confirm_seeds


def test_seeds_are_fresh_and_fixed_by_the_fragment() -> None:
    a, b = confirm_seeds("frag-a"), confirm_seeds("frag-b")
    assert a == confirm_seeds("frag-a") and a != b and len(set(a)) == 3
    assert min(a + b) >= 1 << 20  # never the search's small seeds


def test_the_expert_is_confirmed_and_a_near_miss_is_not() -> None:
    c = Confirmer(lora_reference(), "lora")
    ok = c.confirm(lora_expert_saved())
    assert ok["equivalent"] is True and ok["seeds"] == list(confirm_seeds("lora"))
    assert ok["float_max_rel_err"] is not None and ok["float_max_rel_err"] < 1e-9
    g = KernelGraph()  # X W + X A (2B): right shapes, wrong values
    x, w = g.new_input((16, 256), name="X"), g.new_input((256, 4096), name="W")
    a, b = g.new_input((256, 16), name="A"), g.new_input((16, 4096), name="B")
    g.mark_output(g.add(g.matmul(x, w), g.matmul(g.matmul(x, a), g.mul_scalar(b, 2.0))), "O")
    bad = c.confirm(g)
    assert bad["equivalent"] is False and bad["reason"] == "fingerprints differ on output 'O'"
