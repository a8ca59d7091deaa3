"""Instances of Mirage's subexpression axioms on given terms: the pairs (a, b) with a ⊑ b that every
model of the axioms (the finite models, the normal forms) must satisfy; and the random terms both
sets of tests draw them on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hypothesis import strategies as st

from mugraph.stages.prune.expr import Expr, add, concat, div, mul, red, rms, unary, var


def terms(
    sizes: st.SearchStrategy[int], unaries: Sequence[str], variables: int = 4, max_leaves: int = 6
) -> st.SearchStrategy[Expr]:
    """Random terms over `variables` inputs: sums, products, quotients, reductions and rms over
    `sizes`, the `unaries`, and concats."""

    def grow(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        pair = st.tuples(children, children)
        return st.one_of(
            pair.map(lambda p: add(*p)),
            pair.map(lambda p: mul(*p)),
            pair.map(lambda p: div(*p)),
            st.tuples(sizes, children).map(lambda p: red(*p)),
            st.tuples(sizes, children).map(lambda p: rms(*p)),
            st.tuples(st.sampled_from(unaries), children).map(lambda p: unary(*p)),
            st.tuples(pair, st.integers(1, 2), st.integers(1, 64)).map(lambda p: concat(p[0][0], p[0][1], p[1], p[2])),
        )

    return st.recursive(st.integers(0, variables - 1).map(var), grow, max_leaves=max_leaves)


def sub_instances(x: Expr, y: Expr, i1: int, i2: int, unaries: Iterable[str]) -> list[tuple[Expr, Expr]]:
    """Each ⊑ axiom once on x and y (sizes i1, i2), and x under each unary op of `unaries`."""
    subs: list[tuple[Expr, Expr]] = [
        (x, x),
        (x, add(x, y)),
        (x, mul(x, y)),
        (x, div(x, y)),
        (y, div(x, y)),
        (x, rms(i1, x)),
        (x, red(i1, x)),
        (red(i1, x), x),  # through sum(-i, sum(i, x)) = x
        (x, concat(x, y, 1, i1)),
        (y, concat(x, y, 2, i1)),
        (red(i1, x), red(i1 * i2, x)),
    ]
    return subs + [(x, unary(h, x)) for h in unaries]
