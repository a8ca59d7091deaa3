"""Batched matmuls folded into fewer, larger products, and the Z_pq remainder taken without `%`:
the same values, in both algebras."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mugraph.stages.verify.algebra import Float64Algebra, ZpqAlgebra, folded_matmul, mod_exact
from mugraph.stages.verify.field import FieldSpec, tables

SPEC = FieldSpec()


@st.composite
def batched_pair(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Operand shapes whose batch axes each vary in a, in b, in both or in neither."""
    nb = draw(st.integers(0, 4))
    sa: list[int] = []
    sb: list[int] = []
    for _ in range(nb):
        n = draw(st.integers(2, 3))
        kind = draw(st.sampled_from(["a", "b", "both", "neither"]))
        sa.append(n if kind in ("a", "both") else 1)
        sb.append(n if kind in ("b", "both") else 1)
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    drop_a = draw(st.integers(0, nb))  # a may have fewer leading axes (broadcasting adds them)
    if all(x == 1 for x in sa[:drop_a]):
        sa = sa[drop_a:]
    return tuple(sa) + (m, k), tuple(sb) + (k, n)


@settings(max_examples=200, deadline=None)
@given(batched_pair(), st.integers(0, 2**32 - 1))
def test_folded_matmul_equals_numpy_matmul(shapes: tuple[tuple[int, ...], tuple[int, ...]], seed: int) -> None:
    sa, sb = shapes
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1000, sa).astype(np.float64)
    b = rng.integers(0, 1000, sb).astype(np.float64)
    got = folded_matmul(np, a, b, np.matmul)
    want = np.matmul(a, b)
    assert got.shape == want.shape
    assert np.array_equal(got, want)  # integers far below 2**53: exact in any summation order


def test_column_tiles_of_a_shared_operand_are_one_product_on_a_view() -> None:
    """A grid that tiles W's columns (rms_norm's 768 tiles of 8) becomes one x @ W, with W's
    tiles read in place: the product is called once, on 2-D operands, and copies nothing."""
    rng = np.random.default_rng(0)
    x = rng.random((16, 64))
    w = rng.random((64, 96))
    tiles = w.reshape(64, 12, 8).transpose(1, 0, 2)[:, None]  # (12, 1, 64, 8), a view of w
    calls: list[tuple[Any, Any]] = []

    def mm(p: Any, q: Any) -> Any:
        calls.append((p, q))
        return np.matmul(p, q)

    got = folded_matmul(np, x[None, None], tiles, mm)
    assert len(calls) == 1 and calls[0][0].ndim == 2 and calls[0][1].shape == (64, 96)
    assert np.shares_memory(calls[0][1], w)
    assert np.allclose(got, np.matmul(x, tiles))


def test_operands_whose_fold_would_copy_stay_batched() -> None:
    """A computed (g, k, n) operand (contiguous per block) would fold into (k, g·n) only as a
    transposed copy: the product then stays batched, on the operands as they are."""
    rng = np.random.default_rng(2)
    x = rng.random((1, 8, 64))
    tiles = rng.random((12, 64, 16))
    calls: list[tuple[Any, Any]] = []

    def mm(p: Any, q: Any) -> Any:
        calls.append((p, q))
        return np.matmul(p, q)

    got = folded_matmul(np, x, tiles, mm)
    assert len(calls) == 1 and calls[0][1] is tiles
    assert np.allclose(got, np.matmul(x, tiles))


def test_both_algebras_fold_block_matmuls() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, SPEC.m, (3, 1, 4, 40)).astype(np.float64)
    b = rng.integers(0, SPEC.m, (1, 5, 40, 6)).astype(np.float64)
    z = ZpqAlgebra(np, SPEC, SPEC.omegas[0])
    want = (a.astype(object) @ b.astype(object)) % SPEC.m  # exact big-integer products
    assert np.array_equal(z.matmul(a, b).astype(np.int64), want.astype(np.int64))
    f = Float64Algebra(np)
    assert np.allclose(f.matmul(a, b), np.matmul(a, b), rtol=1e-12)


@pytest.mark.parametrize("m", [SPEC.m, 167 * 83, 94_906_263, 94_906_265, 3])
def test_mod_exact_matches_integer_remainder_up_to_m_squared(m: int) -> None:
    """The quotient's rounding is the risk: x = k*m + r with r at 0, 1 and m - 1 for k near 0
    and near m, the square m*m itself, and random integers below it, against Python's int %."""
    ks = sorted(k for k in {0, 1, 2, m // 2, m - 2, m - 1} if 0 <= k < m)
    xs = [k * m + r for k in ks for r in {0, 1, m - 1}] + [m * m]
    rng = np.random.default_rng(m)
    xs += [int(v) for v in rng.integers(0, m * m, 2000, dtype=np.int64)]
    got = mod_exact(np, np.array(xs, dtype=np.float64), m)
    assert [int(v) for v in got] == [x % m for x in xs]


@pytest.mark.parametrize("m", [SPEC.m, 167 * 83, 94_906_263, 3])
def test_mod_exact_holds_up_to_the_top_of_its_range(m: int) -> None:
    """A GEMM's output reaches far above m*m: the quotients there are near 2**53 / m, where an ulp
    is widest. The largest x = k*m + r allowed (at most 2**53 - m) for r at 0, 1 and m - 1, the
    bound itself, and random integers below it, against Python's int %."""
    top = 2**53 - m
    k_top = top // m
    xs = [k * m + r for k in (k_top - 1, k_top) for r in (0, 1, m - 1) if k * m + r <= top] + [top]
    rng = np.random.default_rng(m)
    xs += [int(v) for v in rng.integers(0, top + 1, 2000, dtype=np.int64)]
    got = mod_exact(np, np.array(xs, dtype=np.float64), m)
    assert [int(v) for v in got] == [x % m for x in xs]


def test_zpq_matmul_and_sum_match_big_integer_arithmetic() -> None:
    """matmul (one chunk, and several under a small chunk) and sum against Python ints, on operands
    full of m - 1, where the float64 sums are largest."""
    z = ZpqAlgebra(np, SPEC, SPEC.omegas[0])
    m = SPEC.m
    rng = np.random.default_rng(2)
    a = np.concatenate([np.full((2, 64), m - 1), rng.integers(0, m, (6, 64))]).astype(np.float64)
    b = np.concatenate([np.full((64, 2), m - 1), rng.integers(0, m, (64, 5))], axis=1).astype(np.float64)
    want = [[sum(int(x) * int(y) for x, y in zip(row, col, strict=True)) % m for col in b.T] for row in a]
    assert z.matmul(a, b).astype(np.int64).tolist() == want
    z._chunk = 7  # several chunks, summed with `add`
    assert z.matmul(a, b).astype(np.int64).tolist() == want
    assert z.sum(a, 1).astype(np.int64)[:, 0].tolist() == [sum(int(x) for x in row) % m for row in a]


def test_zpq_ops_match_big_integer_arithmetic() -> None:
    """add, mul, div and scale in Z_pq against Python ints, on residues that include m - 1."""
    z = ZpqAlgebra(np, SPEC, SPEC.omegas[0])
    m = SPEC.m
    rng = np.random.default_rng(1)
    a = np.concatenate([[m - 1, m - 1, 0, 1], rng.integers(0, m, 500)]).astype(np.float64)
    b = np.concatenate([[m - 1, 1, m - 1, m - 1], rng.integers(0, m, 500)]).astype(np.float64)
    ia, ib = [int(v) for v in a], [int(v) for v in b]
    assert [int(v) for v in z.add(a, b)] == [(x + y) % m for x, y in zip(ia, ib, strict=True)]
    assert [int(v) for v in z.mul(a, b)] == [x * y % m for x, y in zip(ia, ib, strict=True)]
    inv = tables(SPEC, SPEC.omegas[0]).inv
    assert [int(v) for v in z.div(a, b)] == [x * int(inv[y]) % m for x, y in zip(ia, ib, strict=True)]
    c = Fraction(3, 7)
    assert [int(v) for v in z.scale(a, c)] == [x * SPEC.from_fraction(c) % m for x in ia]
