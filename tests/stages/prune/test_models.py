"""The finite models behind the oracle's prefilter satisfy every axiom of z3_encoding.py.

A model that broke one axiom could refute a provable candidate and prune a μGraph the search
must find; each axiom is checked here on random terms for every model (one contract that each
model must pass), so a change to either the axioms or a model that breaks soundness fails.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mugraph.stages.prune.expr import Expr, Head, add, div, mul, red, rms, unary, var
from mugraph.stages.prune.models import FiniteModel, all_models
from tests.helpers.axioms import sub_instances, terms

UNARY = (Head.EXP, Head.SQRT, Head.SILU, Head.GELU, Head.RELU, Head.CLAMP)


TERMS = terms(st.integers(2, 4096), UNARY)


MODELS = [m.name for m in all_models()]


def model(name: str) -> FiniteModel[object]:
    return next(m for m in all_models() if m.name == name)


def in_model(m: FiniteModel[object], a: Expr, b: Expr) -> bool:
    return m.sub(m.value(a), m.value(b))


def same(m: FiniteModel[object], a: Expr, b: Expr) -> bool:
    return m.value(a) == m.value(b) and in_model(m, a, b) and in_model(m, b, a)


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=150, deadline=None)
@given(x=TERMS, y=TERMS, z=TERMS, i1=st.integers(2, 64), i2=st.integers(2, 64))
def test_models_satisfy_the_axioms(name: str, x: Expr, y: Expr, z: Expr, i1: int, i2: int) -> None:
    m = model(name)
    subs = sub_instances(x, y, i1, i2, UNARY)
    assert all(in_model(m, a, b) for a, b in subs)
    equal: list[tuple[Expr, Expr]] = [
        (add(x, y), add(y, x)),
        (mul(x, y), mul(y, x)),
        (add(add(x, y), z), add(x, add(y, z))),
        (mul(mul(x, y), z), mul(x, mul(y, z))),
        (add(mul(x, z), mul(y, z)), mul(add(x, y), z)),
        (add(div(x, z), div(y, z)), div(add(x, y), z)),
        (mul(x, div(y, z)), div(mul(x, y), z)),
        (red(i1, red(i2, x)), red(i1 * i2, x)),
        (red(i1, add(red(i2, x), red(i2, y))), add(red(i1 * i2, x), red(i1 * i2, y))),
        (red(i1, mul(x, y)), mul(red(i1, x), y)),
        (red(i1, div(x, y)), div(red(i1, x), y)),
        (rms(i1, x), rms(i1, red(i2, x))),  # rms is a function of its argument's value
    ]
    assert all(same(m, a, b) for a, b in equal)


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=100, deadline=None)
@given(x=TERMS, y=TERMS, z=TERMS, w=TERMS)
def test_model_sub_is_transitive(name: str, x: Expr, y: Expr, z: Expr, w: Expr) -> None:
    m = model(name)
    chains = (
        (x, y, z),
        (x, add(x, y), mul(add(x, y), z)),
        (x, div(w, x), unary(Head.EXP, div(w, x))),
        (x, unary(Head.EXP, x), mul(unary(Head.EXP, x), y)),
        (x, mul(x, y), div(z, mul(x, y))),
    )
    for a, b, c in chains:
        if in_model(m, a, b) and in_model(m, b, c):
            assert in_model(m, a, c)


@pytest.mark.parametrize("name", MODELS)
def test_distinct_variables_are_not_subexpressions_of_each_other(name: str) -> None:
    m = model(name)
    vs = [var(i) for i in range(4)]
    assert not any(in_model(m, a, b) for a in vs for b in vs if a is not b)


def test_monomials_refute_a_square_of_a_linear_input_and_a_doubled_product() -> None:
    m = model("monomials")
    x, w, a, b = (var(i) for i in range(4))
    lora = add(red(256, mul(x, w)), red(16, mul(red(256, mul(x, a)), b)))
    kept = (red(256, mul(x, a)), mul(x, b), mul(x, mul(a, b)), add(mul(x, w), mul(mul(x, a), b)))
    assert all(in_model(m, c, lora) for c in kept)
    refuted = (mul(x, x), mul(w, a), mul(mul(x, w), b), add(x, x), add(mul(x, w), mul(x, w)), add(x, w), add(w, b))
    assert not any(in_model(m, c, lora) for c in refuted)


def test_nested_atoms_refute_what_leaves_an_exponent_s_argument_behind() -> None:
    m = model("nested")
    q, k, v = (var(i) for i in range(3))
    e = unary(Head.EXP, red(64, mul(q, k)))
    attention = red(4096, mul(div(e, red(4096, e)), v))
    kept = (e, red(4096, e), mul(e, v), div(e, red(64, e)), q, mul(q, k), v)
    assert all(in_model(m, c, attention) for c in kept)
    refuted = (unary(Head.EXP, q), mul(q, q), mul(k, v), mul(e, e), mul(red(64, mul(q, k)), v), unary(Head.EXP, e))
    assert not any(in_model(m, c, attention) for c in refuted)
    assert all(in_model(model("monomials"), c, attention) for c in refuted[:2])  # flat atoms cannot
