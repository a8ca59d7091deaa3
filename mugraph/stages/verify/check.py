"""Equivalence of a candidate μGraph and its reference program.

Fingerprints: for each seed, random inputs in Z_pq and a random ω; the candidate's outputs must
equal the reference's for every seed (Mirage ran one test with fixed inputs; random inputs and
repetition are what the paper's error bound assumes). Then a float64 run on random inputs in [-1, 1)
measures the relative error of every element (`rel_err`), catching what the ring cannot see: a scalar
that differs from the reference's by a multiple of pq over a power of two is the same element of
Z_pq, and only the float run tells 1 + pq/2**35 from 1. Hence the float tolerance, `FLOAT_TOLERANCE`,
is far below what fp16 could show, and far above what reordering float64 sums costs (at most 7e-13
of an element, elements under `SMALL_ELEMENTS` of the output's largest held to that, on every
expert and collected μGraph of the built-in programs).

Which candidate output is which reference output: where the candidate names its inputs and outputs
(an expert, a μGraph the search found, a stitched program), by name, as the emitted module returns
them; a candidate whose output 'Q' computes the reference's 'K' is wrong however its fingerprints
line up. Only the search's own candidates, whose outputs are still unnamed, are matched under the
first permutation that fits (`ReferenceFingerprints.match`), and the search then names each output
after the reference output it matched.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mugraph.arrays.backend import ArrayModule, to_numpy
from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind
from mugraph.stages.verify.algebra import Array, Float64Algebra, ZpqAlgebra
from mugraph.stages.verify.constants import scale_hint
from mugraph.stages.verify.draws import uniform_array
from mugraph.stages.verify.field import FieldSpec
from mugraph.stages.verify.float_error import FLOAT_TOLERANCE, quiet_numerics, rel_err, worst_error, worst_output
from mugraph.stages.verify.interpret import evaluate, probe_outputs
from mugraph.stages.verify.names import NameOrder, name_order, names_of
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


@dataclass(frozen=True, slots=True, eq=False)
class FieldInputs:
    """One seed's ω and inputs. The inputs are `held`, or, where they are too large to keep
    (`ReferenceFingerprints`' `hold_inputs`), drawn again at each use: the draw is a function of the
    seed, so every use sees the same values."""

    seed: int
    omega: int
    held: tuple[Array, ...] | None
    shapes: tuple[tuple[int, ...], ...] = ()
    spec: FieldSpec | None = None
    xp: ArrayModule = np

    @property
    def inputs(self) -> tuple[Array, ...]:
        """The inputs: those held, or a fresh draw the caller alone holds (read it once per use)."""
        if self.held is not None:
            return self.held
        assert self.spec is not None
        return _draw_field(self.shapes, self.spec, self.seed, self.xp)[1]


def field_inputs(graph: KernelGraph, spec: FieldSpec, seed: int, xp: ArrayModule, *, hold: bool = True) -> FieldInputs:
    """Random inputs (generated with NumPy, so equal on every backend) and ω for one seed: each
    input's integers in [0, m) as float64 (`uniform_array`); held, or drawn again at each use."""
    shapes = tuple(tuple(shape) for _, shape, _ in graph.input_signature())
    omega, arrays = _draw_field(shapes, spec, seed, xp)
    return FieldInputs(seed, omega, arrays if hold else None, shapes, spec, xp)


def _draw_field(
    shapes: Sequence[tuple[int, ...]], spec: FieldSpec, seed: int, xp: ArrayModule
) -> tuple[int, tuple[Array, ...]]:
    rng = np.random.default_rng([seed, spec.p, spec.q])
    omega = int(spec.omegas[int(rng.integers(len(spec.omegas)))])
    return omega, tuple(xp.asarray(uniform_array(rng, shape, float(spec.m), 0.0, floor=True)) for shape in shapes)


def float_inputs(graph: KernelGraph, seed: int, xp: ArrayModule) -> list[Array]:
    """Random float64 inputs, uniform in [-1, 1) (`uniform_array`)."""
    rng = np.random.default_rng([seed, 0xF64])
    return [xp.asarray(uniform_array(rng, shape, 2.0, -1.0)) for _, shape, _ in graph.input_signature()]


def input_bytes(graph: KernelGraph) -> int:
    """The bytes one seed's inputs take as float64, as the fingerprints and float64 checks hold them."""
    return sum(8 * math.prod(shape) for _, shape, _ in graph.input_signature())


class ReferenceFingerprints:
    """A reference program's fingerprints for a set of seeds, computed once, matched many times."""

    def __init__(
        self,
        reference: KernelGraph,
        seeds: Sequence[int] = DEFAULT_SEEDS,
        spec: FieldSpec | None = None,
        xp: ArrayModule = np,
        cache_bytes: int = DEFAULT_MAX_BYTES,
        *,
        hold_inputs: bool = True,
    ) -> None:
        """`hold_inputs=False` keeps no seed's inputs between uses (each is drawn again when a
        candidate runs on it), so that at most one seed's are alive at a time: for a fragment whose
        inputs are large, where drawing them costs little beside holding them (draws.py)."""
        self.reference = reference
        self.spec = spec or FieldSpec()
        self.xp = xp
        self.signature = reference.input_signature()
        self.cases: list[FieldInputs] = []
        self.algebras: list[ZpqAlgebra] = []
        self.outputs: list[list[Array]] = []
        shapes = tuple(tuple(shape) for _, shape, _ in self.signature)
        for s in seeds:  # seed by seed: a seed not held is gone before the next one is drawn
            omega, arrays = _draw_field(shapes, self.spec, s, xp)
            self.algebras.append(ZpqAlgebra(xp, self.spec, omega))
            self.outputs.append(evaluate(self.algebras[-1], reference, arrays))
            self.cases.append(FieldInputs(s, omega, arrays if hold_inputs else None, shapes, self.spec, xp))
            del arrays
        # Values candidates share (reuse.py), one cache per seed's inputs.
        self.caches = [ValueCache(cache_bytes // max(1, len(self.cases))) for _ in self.cases]

    def fingerprint(self, candidate: KernelGraph) -> list[list[Array]]:
        return [
            evaluate(a, candidate, c.inputs, cache)
            for a, c, cache in zip(self.algebras, self.cases, self.caches, strict=True)
        ]

    def match_named(self, candidate: KernelGraph) -> tuple[NameOrder | None, str]:
        """`candidate`'s inputs and outputs lined up with the reference's by name, and an empty
        reason where every output equals the reference's of its name on every seed; else
        (None, why), naming the outputs that differ."""
        order = name_order(self.reference, candidate)
        if isinstance(order, str):
            return None, order
        caches = self.caches if order.inputs_in_order else [None] * len(self.cases)  # keys name input positions
        outs = [
            evaluate(a, candidate, _in_order(c.inputs, order.inputs), cache)
            for a, c, cache in zip(self.algebras, self.cases, caches, strict=True)
        ]
        names = names_of(self.reference, OpKind.OUTPUT)

        def equal(i: int, j: int) -> bool:  # the reference's output i and the candidate's j, on every seed
            return all(
                tuple(o[j].shape) == tuple(r[i].shape) and bool(self.xp.array_equal(o[j], r[i]))
                for o, r in zip(outs, self.outputs, strict=True)
            )

        bad = [i for i, j in enumerate(order.outputs) if not equal(i, j)]
        if not bad:
            return order, ""
        parts = []
        for i in bad:
            other = next((names[k] for k in range(len(names)) if k != i and equal(k, order.outputs[i])), None)
            parts.append(f"{names[i]!r}" + (f" (it computes the reference's {other!r})" if other else ""))
        return None, f"fingerprints differ on output{'s' * (len(bad) > 1)} {', '.join(parts)}"

    def match(self, candidate: KernelGraph) -> tuple[int, ...] | None:
        """The output permutation under which `candidate` equals the reference, or None. For the
        search's candidates, whose outputs have no names yet; a named candidate is matched by
        name (`match_named`). Inputs are taken in order."""
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


def _in_order(inputs: Sequence[Array], order: Sequence[int]) -> list[Array]:
    """`inputs` in `order` (a seed's inputs not held are drawn once, on the read that passes them)."""
    return [inputs[k] for k in order]


class FloatReference:
    """A reference program's float64 outputs on one seed's inputs, computed once, compared with
    many candidates; values candidates share are reused between them (reuse.py)."""

    def __init__(
        self, reference: KernelGraph, xp: ArrayModule, seed: int = 0, cache_bytes: int = 0, *, hold_inputs: bool = True
    ) -> None:
        """`hold_inputs=False`: the inputs are drawn again for each candidate (`ReferenceFingerprints`)."""
        self.alg = Float64Algebra(xp)
        self.reference, self.seed, self.xp = reference, seed, xp
        self.n_inputs = len(reference.input_signature())
        inputs = float_inputs(reference, seed, xp)
        with quiet_numerics():
            self.outputs = [to_numpy(r) for r in evaluate(self.alg, reference, inputs)]
        self.held = inputs if hold_inputs else None
        self.cache = ValueCache(cache_bytes) if cache_bytes else None

    @property
    def inputs(self) -> list[Array]:
        """The inputs: those held, or a fresh draw the caller alone holds (read it once per use)."""
        return self.held if self.held is not None else float_inputs(self.reference, self.seed, self.xp)

    def max_rel_err(self, candidate: KernelGraph, perm: Sequence[int]) -> float:
        """The largest of `rel_errs`: each element's error relative to its size (`rel_err`)."""
        return worst_error(self.rel_errs(candidate, perm))

    def rel_errs(self, candidate: KernelGraph, perm: Sequence[int], inputs: Sequence[int] | None = None) -> list[float]:
        """For each reference output i, `rel_err(candidate[perm[i]], reference[i])`; the candidate's
        input j is the reference's input `inputs[j]` (default: in order)."""
        in_order = inputs is None or list(inputs) == list(range(self.n_inputs))
        args = self.inputs if inputs is None else _in_order(self.inputs, inputs)
        with quiet_numerics():
            cand = evaluate(self.alg, candidate, args, self.cache if in_order else None)
        del args
        return [rel_err(to_numpy(cand[perm[i]]), rn) for i, rn in enumerate(self.outputs)]


def float_max_rel_err(
    reference: KernelGraph, candidate: KernelGraph, perm: Sequence[int], xp: ArrayModule, seed: int = 0
) -> float:
    """The largest error over outputs of an element relative to its size (`rel_err`), in float64."""
    return FloatReference(reference, xp, seed).max_rel_err(candidate, perm)


# Fingerprints evaluate sqrt as a table over Z_q and silu and gelu each as a random function of the ring
# (field.py; exp is ω^x, so exp(a+b) = exp(a)·exp(b) does hold), so an identity through sqrt
# (sqrt(a·b) = sqrt(a)·sqrt(b)) or through an activation's true form (silu(x) written as x/(1+exp(-x)))
# does not hold there: an expert that needs one differs in fingerprints while it computes the
# reference. Such an expert is said to be undecided.
UNSEEN = (
    "it may be equivalent through an identity the fingerprints do not model, such as "
    "sqrt(a·b) = sqrt(a)·sqrt(b) or an activation written out (silu(x) as x/(1+exp(-x))), or not be, "
    "as a clamp with other bounds than the reference's, past every value float64 drew; it is not accepted"
)


@dataclass(slots=True)
class CheckResult:
    """`permutation[i]` is the candidate's output that was compared with the reference's output i:
    the one of the same name (`by_name`), or the first permutation whose fingerprints agree."""

    equivalent: bool
    permutation: tuple[int, ...] | None
    seeds: tuple[int, ...]
    fingerprint_seconds: float
    float_max_rel_err: float | None = None
    float_seconds: float = 0.0
    reason: str = ""
    by_name: bool = True
    undecided: bool = False  # fingerprints differ but float64 agrees: not accepted, not refuted


class ReferenceCheck:
    """`check_equivalence` against one reference for many candidates (a program's experts): the
    reference's fingerprints and float64 outputs are computed once, on first use."""

    def __init__(
        self,
        reference: KernelGraph,
        seeds: Sequence[int] = DEFAULT_SEEDS,
        spec: FieldSpec | None = None,
        xp: ArrayModule = np,
        tolerance: float = FLOAT_TOLERANCE,
    ) -> None:
        self.reference, self.seeds, self.spec, self.xp, self.tolerance = reference, tuple(seeds), spec, xp, tolerance
        self._fingerprints: ReferenceFingerprints | None = None
        self._floats: FloatReference | None = None

    @property
    def fingerprints(self) -> ReferenceFingerprints:
        if self._fingerprints is None:
            self._fingerprints = ReferenceFingerprints(self.reference, self.seeds, self.spec, self.xp)
        return self._fingerprints

    @property
    def floats(self) -> FloatReference:
        if self._floats is None:
            self._floats = FloatReference(self.reference, self.xp)
        return self._floats

    def check(self, candidate: KernelGraph, *, by_name: bool = True) -> CheckResult:
        """Fingerprint `candidate` for every seed, then compare in float64. Inputs and outputs are
        matched by name; `by_name=False` is for a candidate whose outputs are unnamed (inputs in
        order, outputs under the first permutation that fits, reported in the result)."""
        t0 = time.perf_counter()
        ref, reference, tolerance = self.fingerprints, self.reference, self.tolerance
        inputs: tuple[int, ...] | None = None
        if by_name:
            order, why = ref.match_named(candidate)
            perm, inputs = (order.outputs, order.inputs) if order is not None else (None, None)
        else:
            perm, why = ref.match(candidate), "fingerprints differ"
        t1 = time.perf_counter()
        result = CheckResult(perm is not None, perm, self.seeds, t1 - t0, by_name=by_name)
        if perm is None:
            result.reason = why
            lined = name_order(reference, candidate) if by_name else None
            if isinstance(lined, NameOrder):  # the names line up: say what float64 makes of it
                errs = self.floats.rel_errs(candidate, lined.outputs, lined.inputs)
                result.float_max_rel_err = worst_error(errs)
                result.float_seconds = time.perf_counter() - t1
                if result.float_max_rel_err <= tolerance:
                    result.undecided = True
                    hint = scale_hint(reference, candidate)
                    why = UNSEEN if hint is None else f"{hint}; it is not accepted"
                    result.reason += f"; yet float64 agrees (relative error {result.float_max_rel_err:.2g}): {why}"
            return result
        errs = self.floats.rel_errs(candidate, perm, inputs)
        result.float_max_rel_err = worst_error(errs)
        result.float_seconds = time.perf_counter() - t1
        if not result.float_max_rel_err <= tolerance:
            worst = worst_output(errs)
            name = names_of(reference, OpKind.OUTPUT)[worst]
            result.equivalent = False
            result.reason = f"float64 relative error {errs[worst]:.3g} on output {name!r}, over {tolerance:g}"
        return result


def check_equivalence(
    reference: KernelGraph,
    candidate: KernelGraph,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    spec: FieldSpec | None = None,
    xp: ArrayModule = np,
    tolerance: float = FLOAT_TOLERANCE,
    *,
    by_name: bool = True,
) -> CheckResult:
    """Fingerprint `candidate` against `reference` for every seed, then compare in float64
    (`ReferenceCheck.check`, for one candidate)."""
    return ReferenceCheck(reference, seeds, spec, xp, tolerance).check(candidate, by_name=by_name)
