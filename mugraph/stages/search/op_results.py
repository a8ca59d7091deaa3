"""What one op over chosen operands makes: its operand tuples, output shape and abstract term.

These run for every listed child of every node, so shapes are worked out once per (kind, shapes)
pair and invalid operands answer None rather than raising.

Operand tuples: unary ops take every tensor; non-commutative binary ops every ordered pair; add and
mul one pair per set, ordered (larger, smaller) index, the order that ranks highest, so no
μGraph reachable with the other order is lost.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from mugraph.ir import shapes
from mugraph.ir.errors import IRError
from mugraph.ir.graph import Op
from mugraph.ir.types import ACCUMULATORS, COMMUTATIVE_OPS, UNARY_OPS, OpKind, Shape
from mugraph.stages.prune import expr as E
from mugraph.stages.search.state import TInfo

SINGLE_INPUT = UNARY_OPS | {OpKind.RMS_NORM, OpKind.REDUCTION} | ACCUMULATORS


@functools.cache
def new_tuples(kind_arity: str, start: int, n: int) -> tuple[tuple[int, ...], ...]:
    """The operand tuples over n tensors that read at least one tensor at index >= start, sorted
    (start 0: every tuple)."""
    if kind_arity == "unary":
        return tuple((i,) for i in range(start, n))
    if kind_arity == "commutative":
        return tuple((i, j) for i in range(start, n) for j in range(i + 1))
    return tuple((i, j) for i in range(n) for j in (range(n) if i >= start else range(start, n)))


def arity(kind: OpKind) -> str:
    """'unary', 'commutative' (one pair per set) or 'ordered' (every ordered pair)."""
    return "unary" if kind in SINGLE_INPUT else "commutative" if kind in COMMUTATIVE_OPS else "ordered"


def operand_tuples(kind: OpKind, n: int) -> tuple[tuple[int, ...], ...]:
    """Every operand tuple of `kind` over n tensors, sorted lexicographically."""
    return new_tuples(arity(kind), 0, n)


@functools.lru_cache(maxsize=1 << 16)
def fast_shape(kind: OpKind, a: Shape, b: Shape | None) -> Shape | None:
    """Output shape of a block op, or None if invalid (no exception: this runs for every candidate,
    and a search meets few distinct shape pairs, so each is worked out once)."""
    if b is None:
        return a
    if len(a) != len(b):
        return None
    if kind is OpKind.MATMUL:
        if len(a) < 2 or a[-1] != b[-2] or a[:-2] != b[:-2]:
            return None
        return a[:-1] + (b[-1],)
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and x != 1 and y != 1:
            return None
        out.append(x if x > y else y)
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)
def accumulator_shape(kind: OpKind, a: Shape, rdx: int) -> Shape | None:
    try:
        return shapes.accumulator(kind, a, rdx)
    except IRError:
        return None


_BINARY_TERMS = {OpKind.ADD: E.add, OpKind.MUL: E.mul, OpKind.DIV: E.div}


@functools.cache
def term_maker(kind: OpKind) -> Callable[..., E.Expr]:
    """`op_term` for one kind without attrs, as a function of the operands' TInfos, with the
    dispatch on the kind done once (block tables make a term per entry)."""
    if kind is OpKind.MATMUL:
        return lambda a, b: E.matmul(a.expr, b.expr, a.shape[-1])
    binary = _BINARY_TERMS.get(kind)
    if binary is not None:
        return lambda a, b: binary(a.expr, b.expr)
    head = E.UNARY_HEADS.get(kind)
    if head is not None:
        return lambda a: E.unary(head, a.expr)
    return lambda *args: op_term(kind, args)


def op_term(kind: OpKind, args: Sequence[TInfo], attrs: Sequence[tuple[str, int | tuple[int, ...]]] = ()) -> E.Expr:
    """The new tensor's term: the commonest kinds directly, the rest through `expr.op_expr`."""
    if kind is OpKind.MATMUL:
        return E.matmul(args[0].expr, args[1].expr, args[0].shape[-1])
    binary = _BINARY_TERMS.get(kind)
    if binary is not None:
        return binary(args[0].expr, args[1].expr)
    head = E.UNARY_HEADS.get(kind)
    if head is not None:
        return E.unary(head, args[0].expr)
    op = Op(kind, tuple(range(len(args))), (), tuple(attrs))
    return E.op_expr(op, [a.expr for a in args], [a.shape for a in args])
