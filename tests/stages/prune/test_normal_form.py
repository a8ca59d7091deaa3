"""The normal forms are a model of Mirage's axioms, so every "no" of the decision procedure is a
refutation: the equations hold between normal forms, each `⊑` axiom holds, `⊑` is transitive and
keeps the inputs apart, all on random terms. Reduction degrees here are powers of two, where the
terms' degrees and the axioms' log-degrees agree exactly (Z3 sees a sum over n as ceil(log2(n))).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from mugraph.stages.prune.decide import Decider
from mugraph.stages.prune.expr import Expr, Head, add, concat, div, matmul, mul, parse, red, rms, unary, var
from mugraph.stages.prune.normal_form import NormalForms
from tests.helpers.axioms import sub_instances, terms

UNARY = (Head.EXP, Head.SQRT, Head.SILU, Head.GELU, Head.RELU, Head.CLAMP, "layer_norm")
POW2 = st.integers(1, 12).map(lambda k: 1 << k)


TERMS = terms(POW2, UNARY)
SMALL = terms(POW2, UNARY, variables=2, max_leaves=3)


def sub(a: Expr, b: Expr) -> bool:
    found = Decider([b]).sub(a, b)
    assert found is not None
    return found


def same(a: Expr, b: Expr) -> bool:
    forms = NormalForms()
    return forms.of(a) == forms.of(b)


@settings(max_examples=200, deadline=None)
@given(x=TERMS, y=TERMS, z=TERMS, i1=POW2, i2=POW2)
def test_normal_forms_satisfy_the_axioms(x: Expr, y: Expr, z: Expr, i1: int, i2: int) -> None:
    subs = sub_instances(x, y, i1, i2, UNARY)
    assert [(a.sexpr, b.sexpr) for a, b in subs if not sub(a, b)] == []
    equal: list[tuple[Expr, Expr]] = [
        (add(add(x, y), z), add(x, add(y, z))),
        (mul(mul(x, y), z), mul(x, mul(y, z))),
        (add(mul(x, z), mul(y, z)), mul(add(x, y), z)),
        (add(div(x, z), div(y, z)), div(add(x, y), z)),
        (mul(x, div(y, z)), div(mul(x, y), z)),
        (red(i1, add(red(i2, x), red(i2, y))), add(red(i1 * i2, x), red(i1 * i2, y))),
        (red(i1, add(x, red(i2, y))), add(red(i1, x), red(i1 * i2, y))),
        (red(i1, mul(x, y)), mul(red(i1, x), y)),
        (red(i1, div(x, y)), div(red(i1, x), y)),
    ]
    assert [(a.sexpr, b.sexpr) for a, b in equal if not same(a, b)] == []
    # Congruence: equal arguments give equal applications, in every argument position.
    a, b = equal[4]
    contexts: list[Callable[[Expr], Expr]] = [
        lambda t: div(z, t),
        lambda t: unary(Head.EXP, t),
        lambda t: rms(i1, t),
        lambda t: concat(y, t, 1, 8),
    ]
    assert all(same(f(a), f(b)) for f in contexts)


@settings(max_examples=300, deadline=None)
@given(x=SMALL, y=SMALL, z=SMALL)
def test_sub_is_transitive(x: Expr, y: Expr, z: Expr) -> None:
    if sub(x, y) and sub(y, z):
        assert sub(x, z)


@settings(max_examples=100, deadline=None)
@given(t=TERMS)
def test_every_subterm_is_a_subexpression(t: Expr) -> None:
    stack = [t]
    while stack:
        s = stack.pop()
        assert sub(s, t)
        stack += s.args


def test_inputs_stay_apart() -> None:
    vs = [var(i) for i in range(4)]
    assert not any(sub(a, b) for a in vs for b in vs if a is not b)


def test_divisors_over_one_atom_keep_their_order() -> None:
    """`(a/y)/z` and `(a/z)/y` are different terms (no equation reorders them), but over a product
    any two neighbouring divisors swap: `((a·b)/y)/z = (a/y)·(b/z) = ((a·b)/z)/y`."""
    a, b, y, z = (var(i) for i in range(4))
    assert not same(div(div(a, y), z), div(div(a, z), y))
    assert same(div(div(mul(a, b), y), z), div(div(mul(a, b), z), y))
    assert same(mul(div(div(a, y), z), b), mul(div(div(a, z), y), b))
    assert sub(div(a, y), div(div(a, y), z)) and not sub(div(a, z), div(div(a, y), z))
    assert sub(div(a, z), div(div(mul(a, b), y), z))


def test_what_no_model_tells_apart() -> None:
    """Cases the finite models cannot refute and Z3 leaves unknown within Mirage's rlimit."""
    x, w, a, b = (var(i) for i in range(4))
    lora = add(matmul(x, w, 256), matmul(matmul(x, a, 256), b, 16))
    assert sub(add(matmul(x, w, 128), matmul(matmul(x, a, 128), b, 16)), lora)  # half-depth partial sums
    assert not sub(add(mul(x, w), mul(x, a)), lora)
    assert not sub(mul(x, x), lora) and not sub(add(x, x), lora)
    # Rms degrees are compared as Z3 sees them, ceil(log2(n)).
    assert sub(rms(4000, x), mul(rms(4096, x), w)) and not sub(rms(2048, x), rms(4096, x))


def test_parameters_key_an_opaque_atom() -> None:
    """A head this module has never heard of (a new op) is an atom like any other."""
    x, y = var(0), var(1)
    ln = parse("(layer_norm 7 (* v0 v1))")
    assert sub(mul(x, y), ln) and sub(x, ln) and not sub(ln, mul(x, y))
    assert not same(ln, parse("(layer_norm 8 (* v0 v1))"))
    # Its arguments are compared by value: x·(y+y) = x·y + x·y.
    assert same(parse("(layer_norm 7 (* (+ v1 v1) v0))"), parse("(layer_norm 7 (+ (* v0 v1) (* v0 v1)))"))
    assert not sub(parse("(layer_norm 8 (* v0 v1))"), mul(ln, y))
    # An rms with a second parameter (say its eps): degree as Z3 sees it, the rest as given.
    assert same(parse("(rms 4096 5 v0)"), parse("(rms 4000 5 v0)"))
    assert not same(parse("(rms 4096 5 v0)"), parse("(rms 4096 6 v0)"))
