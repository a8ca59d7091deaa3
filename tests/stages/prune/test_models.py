"""The finite models behind the oracle's prefilter satisfy every axiom of z3_encoding.py.

A model that broke one axiom could refute a provable candidate and prune a μGraph the search
must find; each axiom is checked here on random terms, so a change to either the axioms or the
models that breaks soundness fails.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from mugraph.stages.prune.expr import Expr, Head, add, concat, div, mul, red, rms, unary, var
from mugraph.stages.prune.models import head_set, monomial_sub, monomials

UNARY = (Head.EXP, Head.SQRT, Head.SILU, Head.GELU, Head.RELU, Head.CLAMP)


def _grow(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: add(*p)),
        pair.map(lambda p: mul(*p)),
        pair.map(lambda p: div(*p)),
        st.tuples(st.integers(2, 4096), children).map(lambda p: red(*p)),
        st.tuples(st.integers(2, 4096), children).map(lambda p: rms(*p)),
        st.tuples(st.sampled_from(UNARY), children).map(lambda p: unary(*p)),
        st.tuples(pair, st.integers(1, 2), st.integers(1, 64)).map(lambda p: concat(p[0][0], p[0][1], p[1], p[2])),
    )


TERMS = st.recursive(st.integers(0, 3).map(var), _grow, max_leaves=6)


def in_model(a: Expr, b: Expr) -> bool:
    """sub(a, b) in the product of both models: what the prefilter relies on."""
    heads: dict[Expr, frozenset[str]] = {}
    monos: dict[Expr, frozenset[tuple[tuple[str, int], ...]]] = {}
    return head_set(a, heads) <= head_set(b, heads) and monomial_sub(monomials(a, monos), monomials(b, monos))


def same(a: Expr, b: Expr) -> bool:
    return in_model(a, b) and in_model(b, a) and monomials(a, {}) == monomials(b, {})


@settings(max_examples=150, deadline=None)
@given(TERMS, TERMS, TERMS, st.integers(2, 64), st.integers(2, 64))
def test_models_satisfy_the_axioms(x: Expr, y: Expr, z: Expr, i1: int, i2: int) -> None:
    subs: list[tuple[Expr, Expr]] = [
        (x, x), (x, add(x, y)), (x, mul(x, y)), (x, div(x, y)), (y, div(x, y)), (x, rms(i1, x)),
        (x, red(i1, x)), (x, concat(x, y, 1, i1)), (y, concat(x, y, 2, i1)), (red(i1, x), red(i1 * i2, x)),
    ]
    subs += [(x, unary(h, x)) for h in UNARY]
    assert all(in_model(a, b) for a, b in subs)
    equal: list[tuple[Expr, Expr]] = [
        (add(x, y), add(y, x)), (mul(x, y), mul(y, x)),
        (add(add(x, y), z), add(x, add(y, z))), (mul(mul(x, y), z), mul(x, mul(y, z))),
        (add(mul(x, z), mul(y, z)), mul(add(x, y), z)),
        (add(div(x, z), div(y, z)), div(add(x, y), z)),
        (mul(x, div(y, z)), div(mul(x, y), z)),
        (red(i1, red(i2, x)), red(i1 * i2, x)),
        (red(i1, add(red(i2, x), red(i2, y))), add(red(i1 * i2, x), red(i1 * i2, y))),
        (red(i1, mul(x, y)), mul(red(i1, x), y)),
        (red(i1, div(x, y)), div(red(i1, x), y)),
    ]
    assert all(same(a, b) for a, b in equal)


@settings(max_examples=100, deadline=None)
@given(TERMS, TERMS, TERMS)
def test_model_sub_is_transitive(x: Expr, y: Expr, z: Expr) -> None:
    for a, b, c in ((x, y, z), (x, add(x, y), mul(add(x, y), z))):
        if in_model(a, b) and in_model(b, c):
            assert in_model(a, c)


def test_distinct_variables_are_not_subexpressions_of_each_other() -> None:
    vs = [var(i) for i in range(4)]
    assert not any(in_model(a, b) for a in vs for b in vs if a is not b)


def test_monomials_refute_a_square_of_a_linear_input() -> None:
    x, w, a, b = (var(i) for i in range(4))
    lora = add(red(256, mul(x, w)), red(16, mul(red(256, mul(x, a)), b)))
    subexpr: Callable[[Expr], bool] = lambda c: monomial_sub(monomials(c, {}), monomials(lora, {}))  # noqa: E731
    assert subexpr(red(256, mul(x, a))) and subexpr(mul(x, b)) and subexpr(add(x, w))
    assert not subexpr(mul(x, x)) and not subexpr(mul(w, a)) and not subexpr(mul(mul(x, w), b))
