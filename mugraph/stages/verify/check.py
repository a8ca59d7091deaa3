"""Equivalence of a candidate μGraph and its reference program.

Fingerprints: for each seed, random inputs in Z_pq and a random ω; the candidate's outputs must
equal the reference's under one permutation for every seed (Mirage ran one test with fixed inputs;
random inputs and repetition are what the paper's error bound assumes). Then a float64 run on random
inputs in [-1, 1) measures the relative error, catching what the ring cannot see (clamp bounds, say).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mugraph.arrays.backend import ArrayModule, to_numpy
from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.algebra import Array, Float64Algebra, ZpqAlgebra
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.interpret import evaluate, probe_outputs
from mugraph.stages.verify.reuse import DEFAULT_MAX_BYTES, ValueCache

DEFAULT_SEEDS = (0, 1, 2)


def match_outputs(
    candidate: Sequence[Sequence[Array]], reference: Sequence[Sequence[Array]], xp: ArrayModule
) -> tuple[int, ...] | None:
    """The first permutation `perm` (lexicographic) with candidate[s][perm[i]] == reference[s][i]
    for every output i and every seed s; None if there is none."""
    n = len(reference[0])
    if any(len(c) != n for c in candidate):
        return None

    def same(i: int, j: int) -> bool:
        return all(
            tuple(c[j].shape) == tuple(r[i].shape) and bool(xp.array_equal(c[j], r[i]))
            for c, r in zip(candidate, reference, strict=True)
        )

    return first_permutation([[same(i, j) for j in range(n)] for i in range(n)])


def first_permutation(eq: Sequence[Sequence[bool]]) -> tuple[int, ...] | None:
    """The first permutation `perm` (lexicographic) with eq[i][perm[i]] for every i, or None."""
    n = len(eq)
    for perm in itertools.permutations(range(n)):
        if all(eq[i][perm[i]] for i in range(n)):
            return perm
    return None


@dataclass(frozen=True, slots=True)
class FieldInputs:
    seed: int
    omega: int
    inputs: tuple[Array, ...]


def field_inputs(graph: KernelGraph, spec: FieldSpec, seed: int, xp: ArrayModule) -> FieldInputs:
    """Random inputs (generated with NumPy, so equal on every backend) and ω for one seed."""
    rng = np.random.default_rng([seed, spec.p, spec.q])
    omega = int(spec.omegas[int(rng.integers(len(spec.omegas)))])
    arrays = tuple(
        xp.asarray(rng.integers(0, spec.m, size=shape, dtype=np.int32).astype(np.float64))
        for _, shape, _ in graph.input_signature()
    )
    return FieldInputs(seed, omega, arrays)


def float_inputs(graph: KernelGraph, seed: int, xp: ArrayModule) -> list[Array]:
    rng = np.random.default_rng([seed, 0xF64])
    return [xp.asarray(rng.uniform(-1.0, 1.0, size=shape)) for _, shape, _ in graph.input_signature()]


class ReferenceFingerprints:
    """A reference program's fingerprints for a set of seeds, computed once, matched many times."""

    def __init__(
        self,
        reference: KernelGraph,
        seeds: Sequence[int] = DEFAULT_SEEDS,
        spec: FieldSpec | None = None,
        xp: ArrayModule = np,
        cache_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.reference = reference
        self.spec = spec or FieldSpec()
        self.xp = xp
        self.signature = reference.input_signature()
        self.cases = [field_inputs(reference, self.spec, s, xp) for s in seeds]
        self.algebras = [ZpqAlgebra(xp, self.spec, c.omega) for c in self.cases]
        self.outputs = [evaluate(a, reference, c.inputs) for a, c in zip(self.algebras, self.cases, strict=True)]
        # Values candidates share (reuse.py), one cache per seed's inputs.
        self.caches = [ValueCache(cache_bytes // max(1, len(self.cases))) for _ in self.cases]

    def fingerprint(self, candidate: KernelGraph) -> list[list[Array]]:
        return [
            evaluate(a, candidate, c.inputs, cache)
            for a, c, cache in zip(self.algebras, self.cases, self.caches, strict=True)
        ]

    def match(self, candidate: KernelGraph) -> tuple[int, ...] | None:
        """The output permutation under which `candidate` equals the reference, or None."""
        if [(s, d) for _, s, d in candidate.input_signature()] != [(s, d) for _, s, d in self.signature]:
            return None
        if self.probe_differs(candidate):
            return None
        return match_outputs(self.fingerprint(candidate), self.outputs, self.xp)

    def probe_differs(self, candidate: KernelGraph) -> bool:
        """Whether the corners the first seed's probe computes (`probe_outputs`) already differ
        from the reference's under every permutation: then so do the whole outputs, and
        `match` is None without running the rest of the grid. False when there is no probe."""
        tiles = probe_outputs(self.algebras[0], candidate, self.cases[0].inputs, self.caches[0])
        if tiles is None:
            return False
        shapes = [t.shape for t in candidate.output_tensors]
        reference = self.outputs[0]
        if len(tiles) != len(reference):
            return True

        def same(i: int, j: int) -> bool:
            r = reference[i]
            if tuple(r.shape) != tuple(shapes[j]):
                return False
            corner = r[tuple(slice(0, n) for n in tiles[j].shape)]
            return bool(self.xp.array_equal(tiles[j], corner))

        return first_permutation([[same(i, j) for j in range(len(tiles))] for i in range(len(tiles))]) is None


class FloatReference:
    """A reference program's float64 outputs on one seed's inputs, computed once, compared with
    many candidates; values candidates share are reused between them (reuse.py)."""

    def __init__(self, reference: KernelGraph, xp: ArrayModule, seed: int = 0, cache_bytes: int = 0) -> None:
        self.alg = Float64Algebra(xp)
        self.inputs = float_inputs(reference, seed, xp)
        self.outputs = [to_numpy(r) for r in evaluate(self.alg, reference, self.inputs)]
        self.cache = ValueCache(cache_bytes) if cache_bytes else None

    def max_rel_err(self, candidate: KernelGraph, perm: Sequence[int]) -> float:
        """max over outputs of max|candidate - reference| / max|reference|."""
        cand = evaluate(self.alg, candidate, self.inputs, self.cache)
        worst = 0.0
        for i, rn in enumerate(self.outputs):
            cn = to_numpy(cand[perm[i]])
            scale = max(float(np.max(np.abs(rn))), np.finfo(np.float64).tiny)
            worst = max(worst, float(np.max(np.abs(cn - rn))) / scale)
        return worst


def float_max_rel_err(
    reference: KernelGraph, candidate: KernelGraph, perm: Sequence[int], xp: ArrayModule, seed: int = 0
) -> float:
    """max over outputs of max|candidate - reference| / max|reference|, in float64."""
    return FloatReference(reference, xp, seed).max_rel_err(candidate, perm)


@dataclass(slots=True)
class CheckResult:
    equivalent: bool
    permutation: tuple[int, ...] | None
    seeds: tuple[int, ...]
    fingerprint_seconds: float
    float_max_rel_err: float | None = None
    float_seconds: float = 0.0
    reason: str = ""


def check_equivalence(
    reference: KernelGraph,
    candidate: KernelGraph,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    spec: FieldSpec | None = None,
    xp: ArrayModule = np,
    tolerance: float = 1e-6,
) -> CheckResult:
    """Fingerprint `candidate` against `reference` for every seed, then compare in float64."""
    t0 = time.perf_counter()
    ref = ReferenceFingerprints(reference, seeds, spec, xp)
    perm = ref.match(candidate)
    t1 = time.perf_counter()
    result = CheckResult(perm is not None, perm, tuple(seeds), t1 - t0)
    if perm is None:
        result.reason = "fingerprints differ"
        return result
    result.float_max_rel_err = float_max_rel_err(reference, candidate, perm, xp)
    result.float_seconds = time.perf_counter() - t1
    if not result.float_max_rel_err <= tolerance:
        result.equivalent = False
        result.reason = f"float64 relative error {result.float_max_rel_err:.3g} over {tolerance:g}"
    return result
