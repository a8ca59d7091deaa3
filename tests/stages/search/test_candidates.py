"""Mirage's candidate generators, checked against lists worked out by hand from the rules."""

from __future__ import annotations

from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.ir.types import OpKind
from mugraph.stages.search import candidates as C
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.op_results import operand_tuples

MLP = preset_config("mlp")
ATTN = preset_config("attention")


def test_rms_norm_grids() -> None:
    # dims 16, 4096, 6144; 4096/x and 6144/x for x in 8..64, 16/x too small; then (batch=16, 1, 1)
    got = C.grid_candidates([(16, 4096), (4096, 6144)], MLP)
    want = sorted(
        {(4096 // x, 1, 1) for x in (8, 16, 32, 64)} | {(6144 // x, 1, 1) for x in (8, 16, 32, 64)} | {(16, 1, 1)}
    )
    assert got == want


def test_attention_grids_contain_the_experts() -> None:
    k1 = C.grid_candidates([(2, 256, 64), (2, 64, 4096), (2, 4096, 64)], ATTN)
    k2 = C.grid_candidates([(2, 256, 1024), (2, 256, 16)], ATTN)
    assert (2, 16, 4) in k1 and (2, 16, 1) in k2
    assert all(32 <= a * b * c <= 1024 or (a, b, c) == (2, 1, 1) for a, b, c in k1 + k2)
    assert k1 == sorted(k1)


def test_no_grid_has_more_blocks_than_a_kernel_may_launch() -> None:
    # a second block graph whose first input is a weight: (4096, 1, 1) would be refused by the IR
    got = C.grid_candidates([(4096, 4096), (8, 4096)], MLP)
    assert got and all(a * b * c <= DEFAULT_LIMITS.max_blocks for a, b, c in got)
    assert (8, 1, 1) not in got and (512, 1, 1) in got
    assert (16, 1, 1) in C.grid_candidates([(16, 4096), (4096, 6144)], MLP)  # a small batch stays


def test_imaps_normalise_size_one_axes_and_check_divisibility() -> None:
    # (0,-1,1) under grid (64,1,1) becomes (0,-1,-1); dim 0 of X (16) is not divisible by 64
    assert C.imap_options((16, 4096), (64, 1, 1), MLP) == [(-1, -1, -1), (1, -1, -1)]
    assert C.imap_options((4096, 6144), (64, 1, 1), MLP) == [(-1, -1, -1), (0, -1, -1), (1, -1, -1)]
    # attention keeps Mirage's three base imaps only
    assert C.imap_options((2, 256, 64), (2, 16, 4), ATTN) == [(0, -1, 1), (0, 1, -1), (0, 2, -1)]
    # under (2, 64, 1) the z axis has size 1: (0,-1,1) becomes (0,-1,-1)
    assert C.imap_options((2, 256, 64), (2, 64, 1), ATTN) == [(0, -1, -1), (0, 1, -1), (0, 2, -1)]


def test_combos_need_every_large_axis_split_by_some_input() -> None:
    combos = C.imap_combos([(16, 4096), (4096, 6144)], (64, 1, 1), MLP)
    assert ((-1, -1, -1), (-1, -1, -1)) not in combos
    assert ((-1, -1, -1), (1, -1, -1)) in combos
    assert len(combos) == 2 * 3 - 1


def test_loop_options() -> None:
    # tiles X [16,4096] and W [4096,96]: fmap -1/0/1 each; ranges must divide every split dim
    opts = C.loop_options([(16, 4096), (4096, 96)], MLP)
    assert (((-1, -1), 1)) in opts and ((1, 0), 64) in opts
    assert ((1, 1), 64) not in opts  # 96 is not divisible by 64
    assert ((1, 1), 16) in opts
    assert all(r == 1 for f, r in opts if f == (-1, -1)) and all(r > 1 for f, r in opts if f != (-1, -1))


def test_omaps_follow_the_grid() -> None:
    assert C.omap_candidates((64, 1, 1), 2, MLP) == [(0, -1, -1), (1, -1, -1)]
    assert (0, 2, 1) in C.omap_candidates((2, 16, 4), 3, ATTN)
    assert C.omap_candidates((2, 16, 4), 2, ATTN) == []


def test_block_sources_follow_mirage() -> None:
    assert C.block_sources(4, preset_config("lora")) == (0, 1, 2, 3)
    assert C.block_sources(4, MLP) == (2, 3)
    assert C.block_sources(3, MLP) == (0, 1, 2)
    assert C.block_sources(5, ATTN) == (3, 4)
    assert C.block_sources(1, MLP) == (0,)  # a program of one input: Mirage's rule has none
    assert C.block_sources(1, MLP.with_overrides({"block_inputs": "mirage"})) is None


def test_commutative_pairs_once() -> None:
    assert list(operand_tuples(OpKind.ADD, 3)) == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
    assert len(operand_tuples(OpKind.DIV, 3)) == 9
    assert list(operand_tuples(OpKind.EXP, 2)) == [(0,), (1,)]
