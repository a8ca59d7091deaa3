"""The canonical digest ignores how a μGraph is written down, and nothing else."""

from __future__ import annotations

from mugraph.ir.canonical import canonical_digest, replaces_find
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.programs.benchmarks import gated_mlp_expert, gqa_expert, lora_expert_saved

NONE = (-1, -1, -1)


def _lora(
    swap_add: bool = False, m1_first: bool = True, grid: int = 64, w_imap: tuple[int, int, int] = (1, -1, -1)
) -> KernelGraph:
    g = KernelGraph()
    x_d, w_d = g.new_input((16, 256), name="X"), g.new_input((256, 4096), name="W")
    a_d, b_d = g.new_input((256, 16), name="A"), g.new_input((16, 4096), name="B")
    bg = BlockGraph(grid=(grid, 1, 1))
    x, w = bg.new_input(x_d, NONE), bg.new_input(w_d, w_imap)
    a, b = bg.new_input(a_d, NONE), bg.new_input(b_d, (1, -1, -1))
    if m1_first:
        m1 = bg.matmul(x, w)
        m3 = bg.matmul(bg.matmul(x, a), b)
    else:
        m3 = bg.matmul(bg.matmul(x, a), b)
        m1 = bg.matmul(x, w)
    s = bg.add(m1, m3) if swap_add else bg.add(m3, m1)
    bg.new_output(bg.accum_no_red(s), (1, -1, -1))
    g.mark_output(g.customized(bg)[0], "O")
    return g


def test_equal_up_to_listing_and_operand_order() -> None:
    base = canonical_digest(lora_expert_saved())
    assert canonical_digest(_lora()) == base
    assert canonical_digest(_lora(swap_add=True)) == base
    assert canonical_digest(_lora(m1_first=False)) == base


def test_different_mappings_differ() -> None:
    base = canonical_digest(_lora())
    assert canonical_digest(_lora(grid=128)) != base
    assert canonical_digest(_lora(grid=64, w_imap=(1, -1, -1))) == base


def test_block_output_order_is_ignored() -> None:
    def two(order: str) -> KernelGraph:
        g = KernelGraph()
        q, k, v = (
            g.new_input((2, 256, 64), name="Q"),
            g.new_input((2, 64, 4096), name="K"),
            g.new_input((2, 4096, 64), name="V"),
        )
        b1 = BlockGraph(grid=(2, 16, 4), forloop=4)
        qt, kt, vt = b1.new_input(q, (0, -1, 1)), b1.new_input(k, (0, 2, -1), 2), b1.new_input(v, (0, 1, -1), 1)
        e = b1.exp(b1.matmul(qt, kt))
        o1, o2 = b1.accum_no_red(b1.matmul(e, vt)), b1.accum_sum(e)
        for t in (o1, o2) if order == "12" else (o2, o1):
            b1.new_output(t, (0, 2, 1))
        outs = g.customized(b1)
        t1, t2 = (outs[0], outs[1]) if order == "12" else (outs[1], outs[0])
        b2 = BlockGraph(grid=(2, 16, 1))
        a, b = b2.new_input(t1, (0, 1, -1)), b2.new_input(t2, (0, 1, -1))
        b2.new_output(b2.div(b2.accum_redtox(a), b2.accum_sum(b)), (0, 1, -1))
        g.mark_output(g.customized(b2)[0], "O")
        return g

    assert canonical_digest(two("12")) == canonical_digest(two("21")) == canonical_digest(gqa_expert())


def test_distinct_experts_differ() -> None:
    assert canonical_digest(gated_mlp_expert()) != canonical_digest(lora_expert_saved())


def test_of_two_finds_the_smaller_path_is_kept() -> None:
    assert replaces_find((3, 1), None)
    assert replaces_find((0, 9, 9), (1,))
    assert not replaces_find((1,), (0, 9, 9))
    assert not replaces_find((2, 5), (2, 5))  # a find at the same path keeps the first
