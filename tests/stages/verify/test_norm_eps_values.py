"""Norms with eps in both interpreters: float64 against NumPy, Z_pq against Python integers, and
fingerprints that tell eps values apart."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.algebra import Float64Algebra, ZpqAlgebra
from mugraph.stages.verify.check import check_equivalence, field_inputs
from mugraph.stages.verify.field import FieldSpec, tables
from mugraph.stages.verify.interpret import evaluate
from tests.helpers.norm_graphs import fused_rms_matmul, rms_matmul

EPS = 1e-6


def rms_program(eps: float) -> KernelGraph:
    return rms_matmul(eps, 8, 64, 16)


def fused_rms(eps: float) -> KernelGraph:
    return fused_rms_matmul(eps, 8, 64, 16, grid=2, forloop=4)


def layer_norm_program(eps: float) -> KernelGraph:
    g = KernelGraph()
    x = g.new_input((8, 24), name="X")
    g.mark_output(g.layer_norm(x, eps=eps), "O")
    return g


def test_float64_rms_norm_with_eps_is_numpys() -> None:
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1e-3, 1e-3, (8, 64)), rng.uniform(-1, 1, (64, 16))  # mean(x²) ~ eps
    want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) @ w
    for g in (rms_program(EPS), fused_rms(EPS)):
        (got,) = evaluate(Float64Algebra(np), g, [x, w])
        np.testing.assert_allclose(got, want, rtol=1e-12)
    (no_eps,) = evaluate(Float64Algebra(np), rms_program(0.0), [x, w])
    assert not np.allclose(no_eps, want, rtol=1e-3)  # at this scale eps matters


def test_float64_layer_norm_is_numpys() -> None:
    x = np.random.default_rng(1).normal(3.0, 0.01, (8, 24))
    c = x - x.mean(axis=-1, keepdims=True)
    for eps in (0.0, 1e-5):
        (got,) = evaluate(Float64Algebra(np), layer_norm_program(eps), [x])
        np.testing.assert_allclose(got, c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps), rtol=1e-10)


def test_field_rms_norm_adds_eps_exactly() -> None:
    """x · (sqrt(Σx² · n⁻¹ + eps))⁻¹ in Z_pq, eps = num · den⁻¹, worked out in Python integers."""
    spec = FieldSpec()
    g = KernelGraph()
    x = g.new_input((3, 5), name="X")
    g.mark_output(g.rms_norm(x, eps=EPS), "O")
    case = field_inputs(g, spec, 7, np)
    (got,) = evaluate(ZpqAlgebra(np, spec, case.omega), g, list(case.inputs))
    m, t = spec.m, tables(spec, case.omega)
    e = Fraction(EPS)
    eps_mod = e.numerator * pow(e.denominator, -1, m) % m
    assert eps_mod != 0
    xs = case.inputs[0].astype(np.int64).tolist()
    for i, row in enumerate(xs):
        mean_sq = sum(v * v for v in row) * pow(5, -1, m) % m
        inv_root = int(t.inv[int(t.sqrt[(mean_sq + eps_mod) % m])])
        assert [int(v) for v in got[i]] == [v * inv_root % m for v in row]


@pytest.mark.parametrize("other", [0.0, 1e-5, 2e-6])
def test_fingerprints_tell_eps_values_apart(other: float) -> None:
    assert check_equivalence(rms_program(EPS), fused_rms(EPS)).equivalent
    assert not check_equivalence(rms_program(EPS), fused_rms(other)).equivalent
    assert not check_equivalence(layer_norm_program(EPS), layer_norm_program(other)).equivalent
