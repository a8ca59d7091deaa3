"""Z_pq arithmetic against Python big integers."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mugraph.ir.errors import MugraphError
from mugraph.stages.verify.algebra import ZpqAlgebra
from mugraph.stages.verify.field import FieldSpec, clamp_table, matmul_chunk, opaque_table, tables

SPEC = FieldSpec()
P, Q, M = SPEC.p, SPEC.q, SPEC.m
elem = st.integers(0, M - 1)
omega = st.sampled_from(SPEC.omegas)


def alg(w: int = SPEC.omegas[0]) -> ZpqAlgebra:
    return ZpqAlgebra(np, SPEC, w)


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_defaults_are_the_papers_primes() -> None:
    assert (P, Q) == (227, 113)
    assert len(SPEC.omegas) == Q - 1
    assert all(pow(w, Q, P) == 1 and w != 1 for w in SPEC.omegas)


@given(elem, elem)
def test_add_and_mul(a: int, b: int) -> None:
    z = alg()
    assert int(z.add(arr(a), arr(b))[0]) == (a + b) % M
    prod = int(z.mul(arr(a), arr(b))[0])
    assert prod % P == (a % P) * (b % P) % P
    assert prod % Q == (a % Q) * (b % Q) % Q


@given(elem, elem)
def test_div_is_residue_wise_inverse(a: int, b: int) -> None:
    r = int(alg().div(arr(a), arr(b))[0])
    for n in (P, Q):
        want = a % n * pow(b % n, -1, n) % n if b % n else 0
        assert r % n == want


@given(elem, elem, omega)
def test_exp_is_omega_power_and_a_homomorphism(a: int, b: int, w: int) -> None:
    z = alg(w)
    e = int(z.exp(arr(a))[0])
    assert e % P == pow(w, a % Q, P)
    assert e % Q == 0
    lhs = int(z.exp(z.add(arr(a), arr(b)))[0])
    rhs = int(z.mul(z.exp(arr(a)), z.exp(arr(b)))[0])
    assert lhs == rhs


@given(elem)
def test_sqrt_of_a_square_is_a_root(a: int) -> None:
    sq = a * a % M
    r = int(alg().sqrt(arr(sq))[0])
    assert r * r % P == sq % P
    assert r * r % Q == sq % Q


@given(elem, st.integers(-(2**20), 2**20), st.integers(0, 30))
def test_scale_by_dyadic_rational(a: int, num: int, k: int) -> None:
    c = Fraction(num, 2**k)
    r = int(alg().scale(arr(a), c)[0])
    assert r * 2**k % M == a * num % M


@pytest.mark.parametrize("w", SPEC.omegas[:3])
def test_activations_are_functions_of_their_own(w: int) -> None:
    """silu, gelu and gelu_erf are each a random function of the ring, none a polynomial in exp: with
    Mirage's silu(x) = x·exp(x) and gelu(x) = x·exp(2x), silu(x)·exp(x) had gelu(x)'s value at every
    element, so a μGraph that wrote gelu that way passed the fingerprints."""
    z, x = alg(w), np.arange(M, dtype=np.int64)
    silu, gelu, erf, e = z.silu(x), z.gelu(x), z.gelu_erf(x), z.exp(x)
    forms = {
        "silu": silu,
        "gelu": gelu,
        "gelu_erf": erf,
        "silu·exp": z.mul(silu, e),
        "x·exp": z.mul(x, e),
        "x·exp(2x)": z.mul(x, z.exp(z.add(x, x))),
        "silu∘gelu": z.silu(gelu),
        "gelu∘silu": z.gelu(silu),
        "exp∘silu": z.exp(silu),
        "silu∘exp": z.silu(e),
    }
    names = list(forms)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert np.mean(forms[a] == forms[b]) < 0.02, (a, b)  # x·exp and x·exp(2x) share 1.3%: x = 0 mod p or q
    assert (z.gelu(x) == alg(w).gelu(x)).all()  # one function for one ω, in every algebra made
    other = next(o for o in SPEC.omegas if o != w)
    assert np.mean(alg(other).silu(x) == silu) < 0.01  # another draw for another ω


@settings(max_examples=30)
@given(st.data())
def test_matmul_is_exact_and_chunk_invariant(data: st.DataObject) -> None:
    n, k, m = (data.draw(st.integers(1, 6)) for _ in range(3))
    a = data.draw(st.lists(elem, min_size=n * k, max_size=n * k))
    b = data.draw(st.lists(elem, min_size=k * m, max_size=k * m))
    want = [[sum(a[i * k + t] * b[t * m + j] for t in range(k)) % M for j in range(m)] for i in range(n)]
    z = alg()
    A, B = np.array(a, dtype=np.int64).reshape(n, k), np.array(b, dtype=np.int64).reshape(k, m)
    assert z.matmul(A, B).tolist() == want
    z._chunk = 2  # force the chunked path
    assert z.matmul(A, B).tolist() == want


def test_matmul_chunk_keeps_float64_exact() -> None:
    c = matmul_chunk(SPEC)
    assert c * (M - 1) ** 2 <= 2**53 - M < (c + 1) * (M - 1) ** 2  # `mod_exact`'s range
    big = np.full((1, 4096), M - 1, dtype=np.int64)
    assert int(alg().matmul(big, big.T)[0, 0]) == 4096 * (M - 1) ** 2 % M


@given(st.lists(elem, min_size=1, max_size=50))
def test_sum(xs: list[int]) -> None:
    assert int(alg().sum(np.array(xs, dtype=np.int64), -1)[0]) == sum(xs) % M


def test_tables_cover_the_ring() -> None:
    t = tables(SPEC, SPEC.omegas[3])
    for table in (t.inv, t.exp, t.sqrt, t.relu, clamp_table(SPEC, -1.0, 1.0), opaque_table(SPEC, "silu", 3)):
        assert table.shape == (M,)
        assert table.min() >= 0 and table.max() < M


def test_clamps_with_other_bounds_are_other_functions() -> None:
    """One table per pair of bounds: a clamp to ±100 and one to ±1000 agree on every float the float64
    check draws (|x| < 20 there), so only the ring can tell them apart."""
    bounds = [(-100.0, 100.0), (-1000.0, 1000.0), (-100.0, 60000.0), (-25.0, 25.0), (0.0, 6.0), (-1.0, 1.0)]
    tables_ = [clamp_table(SPEC, lo, hi) for lo, hi in bounds]
    for i, a in enumerate(tables_):
        for b in tables_[i + 1 :]:
            assert (a != b).any()
    assert (clamp_table(SPEC, -0.0, 6.0) == clamp_table(SPEC, 0.0, 6.0)).all()
    x = np.arange(M)
    for t in tables_:  # per residue ring: a map of residues, the identity on a band, flat past its ends
        for r in (SPEC.p, SPEC.q):
            pairs = set(zip((x % r).tolist(), (t % r).tolist(), strict=True))
            assert len(pairs) == r  # the value mod r depends on the input mod r alone
            ys = [y for _, y in sorted(pairs)]
            assert ys == sorted(ys) and sum(y == v for v, y in enumerate(ys)) >= r // 6


@pytest.mark.parametrize(
    ("p", "q", "message"),
    [
        (225, 113, "prime"),
        (227, 7, "divide"),
        (65537, 65521, "divide"),
        (2**31 - 1, 3, "at most"),
        (4126523, 23, "at most"),
    ],  # pq just above 94,906,265, the last m with m*m <= 2**53
)
def test_bad_primes_are_refused(p: int, q: int, message: str) -> None:
    with pytest.raises(MugraphError, match=message):
        FieldSpec(p, q)


def test_other_primes_work() -> None:
    spec = FieldSpec(167, 83)  # Mirage's current code
    z = ZpqAlgebra(np, spec, spec.omegas[0])
    assert int(z.mul(arr(100), arr(200))[0]) == 100 * 200 % (167 * 83)
