"""Candidate expressions with the verdict Mirage's axioms give them (keep or prune), per program.

Like Mirage's own oracle test (cpp_examples/egg_tests.cc on gated-MLP subexpressions): true
subexpressions of the output, tile-level partial sums included, are kept; the others are pruned.
"""

from __future__ import annotations

from mugraph.stages.prune.expr import Expr, Head, add, concat, div, matmul, mul, red, unary, var

v0, v1, v2, v3 = (var(i) for i in range(4))


def silu(x: Expr) -> Expr:
    return unary(Head.SILU, x)


def exp(x: Expr) -> Expr:
    return unary(Head.EXP, x)


XW1, XW2 = matmul(v0, v1, 4096), matmul(v0, v2, 4096)
GATED_MLP: list[tuple[str, Expr, bool]] = [
    ("X·W1", XW1, True),
    ("X·W1 tile (k=128)", matmul(v0, v1, 128), True),
    ("X·W1 before the sum", mul(v0, v1), True),
    ("silu(X·W1)", silu(XW1), True),
    ("X·W2", XW2, True),
    ("silu(X·W1)·(X·W2)", mul(silu(XW1), XW2), True),
    ("silu of an accumulated tile", silu(red(32, matmul(v0, v1, 128))), True),
    ("W1·W2", matmul(v1, v2, 4096), False),
    ("exp(X·W1)", exp(XW1), False),
    ("silu(X)", silu(v0), False),
    ("silu(X·W2)", silu(XW2), False),
    ("X·W1 + X·W2", add(XW1, XW2), False),
    ("X·W1 / X·W2", div(XW1, XW2), False),
    ("W1·W1 (W1 appears once in each product)", mul(v1, v1), False),
]

XA = matmul(v0, v2, 256)
LORA: list[tuple[str, Expr, bool]] = [
    ("X·W", matmul(v0, v1, 256), True),
    ("X·A", XA, True),
    ("(X·A)·B", matmul(XA, v3, 16), True),
    ("X·W + (X·A)·B", add(matmul(v0, v1, 256), matmul(XA, v3, 16)), True),
    (
        "concat(X, XA)·concat(W, B) over 2 iterations",
        red(2, matmul(concat(v0, matmul(v0, v2, 128), 1, 128), concat(v1, v3, 2, 128), 144)),
        True,
    ),
    ("X·W tile (k=128)", matmul(v0, v1, 128), True),
    ("W·A", matmul(v1, v2, 256), False),
    ("exp(X)", exp(v0), False),
    ("X + W", add(v0, v1), False),
    ("X·W summed 4096 times", matmul(v0, v1, 4096), False),
    ("(X·W)·B", matmul(matmul(v0, v1, 256), v3, 16), False),
    ("silu(X·A)", silu(XA), False),
]
