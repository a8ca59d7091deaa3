"""Arithmetic in Z_pq (p, q prime, q | p-1), the ring μGraph fingerprints are computed in.

A value is one integer in [0, pq); by the Chinese remainder theorem it is the pair of its residues
mod p and mod q, and + and * act on both at once. The other ops:

- div: multiplication by the inverse, taken residue by residue (a zero residue has inverse 0);
- exp(x) = ω^(x mod q) in the p-component and 0 in the q-component. ω has order q in Z_p*, so
  exp(a + b) = exp(a)·exp(b), and an exp of an exp degenerates (the LAX limit of one exp per path);
- sqrt: per residue the smallest root of x, or of n·x (n the smallest non-residue) when x has none;
- silu, gelu and gelu_erf: each its own random function of the whole ring (`opaque_table`), drawn
  from the op's name, the primes and ω. Not Mirage's rules, silu(x) = x·exp(x) and gelu(x) =
  x·exp(2x): those are polynomials in exp that a wrong μGraph can write out (silu(x)·exp(x) would
  have gelu(x)'s fingerprint exactly). A random function almost surely agrees with no expression
  but itself, and an elementwise function commutes with every tiling, so a right μGraph keeps its
  fingerprints;
- relu and clamp: the residue itself in the lower half / a middle band of [0, r), else the nearest
  end of it. The band's ends are drawn from clamp's float bounds (a hash of them), so two clamps with
  other bounds are other functions: one table for all of them matched clamps whose bounds lay beyond
  the float64 check's values;
- scaling by a rational c = n/d (mul_scalar, mean, rms): n·d⁻¹, exact because a float is a dyadic
  rational and 2 is invertible.

Every unary op is one table lookup of size pq, so it runs unchanged on NumPy and CuPy.
Defaults p = 227, q = 113 (the paper's); any primes with q | p-1 and (pq)**2 <= 2**53 work: the
product of two residues must be exact in float64, where the arithmetic runs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import isqrt

import numpy as np

from mugraph.ir.errors import MugraphError

EXACT_BELOW = 2**53  # float64 holds every integer below this exactly
MAX_MODULUS = isqrt(EXACT_BELOW)  # 94,906,265: the largest m with m*m <= 2**53


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def _roots_table(r: int) -> list[int]:
    """sqrt mod prime r as described in the module docstring."""
    root: dict[int, int] = {}
    for s in range(r):
        root.setdefault(s * s % r, s)
    nonres = next(n for n in range(2, r) if n not in root) if r > 2 else 1
    return [root[x] if x in root else root[nonres * x % r] for x in range(r)]


@lru_cache(maxsize=16)
def _omegas(p: int, q: int) -> tuple[int, ...]:
    return tuple(w for w in range(2, p) if pow(w, q, p) == 1)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """The primes of the fingerprint ring Z_pq."""

    p: int = 227
    q: int = 113

    def __post_init__(self) -> None:
        if not (is_prime(self.p) and is_prime(self.q)):
            raise MugraphError(f"fingerprint primes p={self.p}, q={self.q} must both be prime")
        if (self.p - 1) % self.q:
            raise MugraphError(f"fingerprint prime q={self.q} must divide p-1={self.p - 1}")
        if self.m > MAX_MODULUS:
            raise MugraphError(
                f"fingerprint modulus p*q={self.m} must be at most {MAX_MODULUS:,}: the product "
                "of two residues must stay exact in float64 (below 2**53)"
            )

    @property
    def m(self) -> int:
        return self.p * self.q

    def crt(self, rp: int, rq: int) -> int:
        """The value in [0, pq) with residues rp mod p and rq mod q."""
        p, q = self.p, self.q
        return (rp * q * pow(q, -1, p) + rq * p * pow(p, -1, q)) % (p * q)

    @property
    def omegas(self) -> tuple[int, ...]:
        """All elements of order q in Z_p*, sorted; a fingerprint picks ω among them."""
        return _omegas(self.p, self.q)

    def from_fraction(self, c: Fraction) -> int:
        """The ring element of a rational whose denominator is invertible."""
        num, den = c.numerator, c.denominator
        if den % self.p == 0 or den % self.q == 0:
            raise MugraphError(f"scalar {c} has a denominator not invertible mod {self.p}*{self.q}")
        return num * self.crt(pow(den, -1, self.p), pow(den, -1, self.q)) % self.m


@dataclass(frozen=True, slots=True)
class Tables:
    """Lookup tables (NumPy int64, length pq) for the unary ops of one field and one ω."""

    inv: np.ndarray
    exp: np.ndarray
    sqrt: np.ndarray
    relu: np.ndarray


@lru_cache(maxsize=64)
def tables(spec: FieldSpec, omega: int) -> Tables:
    p, q, m = spec.p, spec.q, spec.m
    if omega not in spec.omegas:
        raise MugraphError(f"omega={omega} does not have order {q} mod {p}")
    x = np.arange(m, dtype=np.int64)
    xp_, xq = x % p, x % q

    def crt(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _crt(spec, a, b)

    inv_p = np.array([0] + [pow(v, -1, p) for v in range(1, p)], dtype=np.int64)
    inv_q = np.array([0] + [pow(v, -1, q) for v in range(1, q)], dtype=np.int64)
    pw = np.array([pow(omega, k, p) for k in range(q)], dtype=np.int64)
    sq_p = np.array(_roots_table(p), dtype=np.int64)
    sq_q = np.array(_roots_table(q), dtype=np.int64)

    def relu_r(r: np.ndarray, n: int) -> np.ndarray:
        return np.asarray(np.where(r <= n // 2, r, 0), dtype=np.int64)

    return Tables(
        inv=crt(inv_p[xp_], inv_q[xq]),
        exp=crt(pw[xq], np.zeros_like(xq)),
        sqrt=crt(sq_p[xp_], sq_q[xq]),
        relu=crt(relu_r(xp_, p), relu_r(xq, q)),
    )


@lru_cache(maxsize=64)
def clamp_table(spec: FieldSpec, lo: float, hi: float) -> np.ndarray:
    """clamp's table for the bounds (lo, hi): per residue ring of size r, the residue itself within a
    band [a, b) of [0, r), else the nearest end of it; a and b drawn from the bounds, so one pair of
    bounds gives one function and another pair almost surely another (about one pair in 1,400 shares
    the band mod q, one in 5,700 mod p; both at once, one in 8 million)."""
    key = f"{float(lo) + 0.0!r},{float(hi) + 0.0!r}".encode()  # -0.0 and 0.0 are one bound
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "little")
    x = np.arange(spec.m, dtype=np.int64)

    def band(r: np.ndarray, n: int, bits: int) -> np.ndarray:
        sixth = n // 6
        a = sixth + bits % (2 * sixth)
        b = a + sixth + (bits // (2 * sixth)) % (2 * sixth)
        return np.asarray(np.clip(r, a, b), dtype=np.int64)

    return _crt(spec, band(x % spec.p, spec.p, draw & 0xFFFFFFFF), band(x % spec.q, spec.q, draw >> 64))


@lru_cache(maxsize=64)
def opaque_table(spec: FieldSpec, name: str, omega: int) -> np.ndarray:
    """A unary op with no identity the fingerprints must keep (silu, gelu, gelu_erf) as a random
    function of Z_pq: each value uniform in [0, pq), drawn from a hash of the op's name, the primes
    and ω, so each op is another function, the same in every process, and each ω another draw. Two
    expressions that differ anywhere (another activation, another composition order, an activation
    written out through exp) then agree at one element with chance about 1/pq."""
    key = f"{name}|{spec.p}|{spec.q}|{omega}".encode()
    seed = int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "little")
    return np.random.default_rng(seed).integers(0, spec.m, size=spec.m, dtype=np.int64)


def _crt(spec: FieldSpec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The values in [0, pq) with residues `a` mod p and `b` mod q."""
    p, q = spec.p, spec.q
    return np.asarray((a * (q * pow(q, -1, p)) + b * (p * pow(p, -1, q))) % spec.m, dtype=np.int64)


def matmul_chunk(spec: FieldSpec) -> int:
    """Largest contraction length whose float64 dot products of residues stay exact and reducible by
    `algebra.mod_exact` (at most 2**53 - m; one product, below m*m <= 2**53, always is)."""
    return max(1, (EXACT_BELOW - spec.m) // ((spec.m - 1) ** 2))
