"""The value domains the interpreter runs in: Z_pq for fingerprints, float64 for numerics.

Both are written against an array namespace `xp` (NumPy or CuPy), so one interpreter serves both
domains on both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from itertools import pairwise
from math import erf, prod
from typing import Any, Protocol

import numpy as np

from mugraph.arrays.backend import ArrayModule
from mugraph.stages.verify.field import FieldSpec, clamp_table, matmul_chunk, opaque_table, tables

Array = Any


class Algebra(Protocol):
    """The primitive operations every op of the IR is expressed in."""

    xp: ArrayModule

    def add(self, a: Array, b: Array) -> Array: ...
    def mul(self, a: Array, b: Array) -> Array: ...
    def div(self, a: Array, b: Array) -> Array: ...
    def exp(self, a: Array) -> Array: ...
    def sqrt(self, a: Array) -> Array: ...
    def silu(self, a: Array) -> Array: ...
    def gelu(self, a: Array) -> Array: ...
    def gelu_erf(self, a: Array) -> Array: ...
    def relu(self, a: Array) -> Array: ...
    def clamp(self, a: Array, lo: float, hi: float) -> Array: ...
    def scale(self, a: Array, c: Fraction) -> Array: ...
    def shift(self, a: Array, c: Fraction) -> Array: ...
    def matmul(self, a: Array, b: Array) -> Array: ...
    def sum(self, a: Array, axis: int) -> Array: ...


def merges(x: Array, axes: Sequence[int]) -> bool:
    """Whether `axes` of `x` (consecutive once transposed into this order) merge into one axis as a
    view: each one's stride is the next one's times its length (axes of length 1 aside)."""
    dims = [(x.shape[i], x.strides[i]) for i in axes if x.shape[i] != 1]
    return all(s0 == s1 * n1 for (_, s0), (n1, s1) in pairwise(dims))


def folded_matmul(xp: ArrayModule, a: Array, b: Array, mm: Callable[[Array, Array], Array]) -> Array:
    """a @ b (batched, broadcasting) with `mm` doing the products, each batch axis along which
    only one operand varies folded into that operand's matrix where that is a view: an axis only
    `a` varies along joins its rows, one only `b` varies along joins its columns.

    A block graph's matmul is batched over the grid. A grid that tiles the output's columns
    gives one small product per block, each reading the whole shared left operand (768 products
    of 16x4096 by 4096x8 for rms_norm's W tiled by 8): 8x slower in BLAS than the one product
    of 16x4096 by 4096x6144 they add up to. Folding rebuilds that product; the tiles of a weight
    are usually a view of it. Where they are not (a computed (g, k, n) operand, whose fold is a
    transposed copy: 134 MB for gated_mlp's W), the products stay batched, which reads it once."""
    batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    if prod(batch) <= 1 or a.ndim < 2 or b.ndim < 2:
        return mm(a, b)
    nb = len(batch)
    a_ = a.reshape((1,) * (nb + 2 - a.ndim) + tuple(a.shape))
    b_ = b.reshape((1,) * (nb + 2 - b.ndim) + tuple(b.shape))
    rows = [i for i in range(nb) if a_.shape[i] > 1 and b_.shape[i] == 1]
    cols = [i for i in range(nb) if a_.shape[i] == 1 and b_.shape[i] > 1]
    rows = rows if merges(a_, [*rows, nb]) else []
    cols = cols if merges(b_, [*cols, nb + 1]) else []
    if not rows and not cols:
        return mm(a, b)
    m, k, n = a_.shape[-2], a_.shape[-1], b_.shape[-1]
    keep = [i for i in range(nb) if batch[i] > 1 and i not in rows and i not in cols]  # axes `mm` broadcasts
    rest = [i for i in range(nb) if batch[i] == 1]  # length 1 in both
    rn, cn = prod(batch[i] for i in rows), prod(batch[i] for i in cols)
    # a: (keep, rows, m, k) -> (keep, rows*m, k); b: (keep, k, cols, n) -> (keep, k, cols*n)
    a2 = xp.transpose(a_, keep + cols + rest + rows + [nb, nb + 1])
    a2 = a2.reshape(tuple(a_.shape[i] for i in keep) + (rn * m, k))
    b2 = xp.transpose(b_, keep + rows + rest + [nb] + cols + [nb + 1])
    b2 = b2.reshape(tuple(b_.shape[i] for i in keep) + (k, cn * n))
    p, r, c = len(keep), len(rows), len(cols)
    pk = tuple(batch[i] for i in keep)
    out = mm(a2, b2).reshape(pk + tuple(batch[i] for i in rows) + (m,) + tuple(batch[i] for i in cols) + (n,))
    pos = {ax: j for j, ax in enumerate(keep)}
    pos.update({ax: p + j for j, ax in enumerate(rows)})
    pos.update({ax: p + r + 1 + j for j, ax in enumerate(cols)})
    out = xp.transpose(out, [pos[i] for i in sorted(pos)] + [p + r, p + r + 1 + c])
    return out.reshape(batch + (m, n))


def mod_exact(xp: ArrayModule, x: Array, m: int) -> Array:
    """x mod m for a float64 array of integers in [0, 2**53 - m], in one new array.

    x - floor(x / m) * m is exact there, and in NumPy 12x to 18x faster than `%`, which also handles
    signs and fractions (16x4096 sums, products and GEMM outputs: 0.05 ms against 0.58-0.90 ms).
    Write x = k*m + r with 0 <= r < m. The quotient x / m is rounded to nearest, and rounding is
    monotone, so it is at least k. For r = 0 it is k exactly. Otherwise k + r/m lies at least 1/m
    below k + 1, and (k + 1)*m <= x + m - 1 < 2**53, so half an ulp there is at most
    (k + 1) / 2**53 < 1/m: the quotient cannot round up to k + 1, and its floor is k. Then k*m and
    x - k*m are integers below 2**53, exact. Products and sums of residues (below m*m, or a GEMM's
    `field.matmul_chunk` terms) stay in range."""
    q = x / m
    if getattr(q, "ndim", 0) == 0:
        return x % m
    xp.floor(q, out=q)
    q *= m
    return xp.subtract(x, q, out=q)


class ZpqAlgebra:
    """Exact arithmetic in Z_pq; ω picks the exp homomorphism.

    Values are float64 arrays holding integers in [0, pq): every product of two residues and every
    sum the ops form stays below 2**53 (FieldSpec bounds pq for it), so float64 is exact, and BLAS
    multiplies the inputs (a [4096, 6144] weight, say) without converting them for every candidate.
    Integer arrays are accepted as operands too. Table lookups index with integers.
    """

    def __init__(self, xp: ArrayModule, spec: FieldSpec, omega: int) -> None:
        self.xp = xp
        self.spec = spec
        self.m = spec.m
        t = tables(spec, omega)
        self._inv = xp.asarray(t.inv.astype(float))
        self._exp = xp.asarray(t.exp.astype(float))
        self._sqrt = xp.asarray(t.sqrt.astype(float))
        self._relu = xp.asarray(t.relu.astype(float))
        self._clamps: dict[tuple[float, float], Array] = {}
        self._opaque: dict[str, Array] = {}
        self._omega = omega
        self._chunk = matmul_chunk(spec)

    def _index(self, a: Array) -> Array:
        return a.astype(self.xp.intp)

    def _float(self, a: Array) -> Array:
        return a if a.dtype == self.xp.float64 else a.astype(self.xp.float64)

    def add(self, a: Array, b: Array) -> Array:
        return mod_exact(self.xp, self._float(a) + b, self.m)

    def mul(self, a: Array, b: Array) -> Array:
        return mod_exact(self.xp, self._float(a) * b, self.m)

    def div(self, a: Array, b: Array) -> Array:
        return mod_exact(self.xp, self._float(a) * self._inv[self._index(b)], self.m)

    def exp(self, a: Array) -> Array:
        return self._exp[self._index(a)]

    def sqrt(self, a: Array) -> Array:
        return self._sqrt[self._index(a)]

    def _opaque_op(self, name: str, a: Array) -> Array:
        """An activation as its own random function of the ring (`field.opaque_table`)."""
        table = self._opaque.get(name)
        if table is None:
            table = self._opaque[name] = self.xp.asarray(opaque_table(self.spec, name, self._omega).astype(float))
        return table[self._index(a)]

    def silu(self, a: Array) -> Array:
        return self._opaque_op("silu", a)

    def gelu(self, a: Array) -> Array:
        return self._opaque_op("gelu", a)

    def gelu_erf(self, a: Array) -> Array:
        """Another function than gelu's (the tanh form), so the two forms never match."""
        return self._opaque_op("gelu_erf", a)

    def relu(self, a: Array) -> Array:
        return self._relu[self._index(a)]

    def clamp(self, a: Array, lo: float, hi: float) -> Array:
        table = self._clamps.get((lo, hi))
        if table is None:
            table = self._clamps[lo, hi] = self.xp.asarray(clamp_table(self.spec, lo, hi).astype(float))
        return table[self._index(a)]

    def scale(self, a: Array, c: Fraction) -> Array:
        return mod_exact(self.xp, self._float(a) * self.spec.from_fraction(c), self.m)

    def shift(self, a: Array, c: Fraction) -> Array:
        """a + c for a rational constant (a norm's eps), exact as `scale` is."""
        return mod_exact(self.xp, self._float(a) + self.spec.from_fraction(c), self.m)

    def matmul(self, a: Array, b: Array) -> Array:
        return folded_matmul(self.xp, a, b, self._matmul)

    def _matmul(self, a: Array, b: Array) -> Array:
        """Exact: float64 GEMM on contraction chunks short enough (`field.matmul_chunk`) that every sum
        stays within `mod_exact`'s range."""
        xp, k = self.xp, a.shape[-1]
        af, bf = self._float(a), self._float(b)
        if k <= self._chunk:
            return mod_exact(xp, xp.matmul(af, bf), self.m)
        out = None
        for s in range(0, k, self._chunk):
            part = mod_exact(xp, xp.matmul(af[..., s : s + self._chunk], bf[..., s : s + self._chunk, :]), self.m)
            out = part if out is None else self.add(out, part)
        return out

    def sum(self, a: Array, axis: int) -> Array:
        return mod_exact(self.xp, self.xp.sum(self._float(a), axis=axis, keepdims=True), self.m)


def _erf(xp: ArrayModule, a: Array) -> Array:
    """erf element-wise in float64: CuPy's special function on a GPU, the C library's on the host."""
    if xp is not np:
        from cupyx.scipy.special import erf as cupy_erf

        return cupy_erf(a)
    return np.vectorize(erf, otypes=[np.float64])(a)


class Float64Algebra:
    """Real arithmetic in float64: the numerical check beside the fingerprints."""

    def __init__(self, xp: ArrayModule) -> None:
        self.xp = xp

    def add(self, a: Array, b: Array) -> Array:
        return a + b

    def mul(self, a: Array, b: Array) -> Array:
        return a * b

    def div(self, a: Array, b: Array) -> Array:
        return a / b

    def exp(self, a: Array) -> Array:
        return self.xp.exp(a)

    def sqrt(self, a: Array) -> Array:
        return self.xp.sqrt(a)

    def silu(self, a: Array) -> Array:
        return a / (1.0 + self.xp.exp(-a))

    def gelu(self, a: Array) -> Array:
        """The tanh form of GELU (the fingerprint treats gelu as an opaque function)."""
        c = 0.7978845608028654  # sqrt(2/pi)
        return 0.5 * a * (1.0 + self.xp.tanh(c * (a + 0.044715 * a**3)))

    def gelu_erf(self, a: Array) -> Array:
        """The exact form, x/2·(1 + erf(x/√2)), as PyTorch's default `gelu` computes it."""
        return 0.5 * a * (1.0 + _erf(self.xp, a * 0.7071067811865476))

    def relu(self, a: Array) -> Array:
        return self.xp.maximum(a, 0.0)

    def clamp(self, a: Array, lo: float, hi: float) -> Array:
        return self.xp.clip(a, lo, hi)

    def scale(self, a: Array, c: Fraction) -> Array:
        return a * float(c)

    def shift(self, a: Array, c: Fraction) -> Array:
        return a + float(c)

    def matmul(self, a: Array, b: Array) -> Array:
        return folded_matmul(self.xp, a, b, self.xp.matmul)

    def sum(self, a: Array, axis: int) -> Array:
        return self.xp.sum(a, axis=axis, keepdims=True)
