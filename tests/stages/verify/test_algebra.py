"""Batched matmuls folded into fewer, larger products: the same values, in both algebras."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mugraph.stages.verify.algebra import Float64Algebra, ZpqAlgebra, folded_matmul
from mugraph.stages.verify.field import FieldSpec

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


def test_both_algebras_fold_block_matmuls() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, SPEC.m, (3, 1, 4, 40)).astype(np.float64)
    b = rng.integers(0, SPEC.m, (1, 5, 40, 6)).astype(np.float64)
    z = ZpqAlgebra(np, SPEC, SPEC.omegas[0])
    want = (a.astype(object) @ b.astype(object)) % SPEC.m  # exact big-integer products
    assert np.array_equal(z.matmul(a, b).astype(np.int64), want.astype(np.int64))
    f = Float64Algebra(np)
    assert np.allclose(f.matmul(a, b), np.matmul(a, b), rtol=1e-12)
