"""Instances of Mirage's subexpression axioms on given terms: the pairs (a, b) with a ⊑ b that every
model of the axioms (the finite models, the normal forms) must satisfy."""

from __future__ import annotations

from collections.abc import Iterable

from mugraph.stages.prune.expr import Expr, add, concat, div, mul, red, rms, unary


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
