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
from typing import assert_never

from mugraph.ir import shapes
from mugraph.ir.errors import IRError
from mugraph.ir.families import BOUNDARY, PREDEFINED, PROPS, Family
from mugraph.ir.graph import Op
from mugraph.ir.types import COMMUTATIVE_OPS, AccumKind, OpKind, Shape
from mugraph.stages.prune import expr as E
from mugraph.stages.search.state import TInfo


@functools.cache
def new_tuples(kind_arity: str, start: int, n: int) -> tuple[tuple[int, ...], ...]:
    """The operand tuples over n tensors that read at least one tensor at index >= start, sorted
    (start 0: every tuple)."""
    if kind_arity == "unary":
        return tuple((i,) for i in range(start, n))
    if kind_arity == "commutative":
        return tuple((i, j) for i in range(start, n) for j in range(i + 1))
    return tuple((i, j) for i in range(n) for j in (range(n) if i >= start else range(start, n)))


@functools.cache
def arity(kind: OpKind) -> str:
    """'unary', 'commutative' (one pair per set) or 'ordered' (every ordered pair), from the kind's
    arity in its family's table."""
    n = PROPS[kind].arity
    if kind in BOUNDARY or n is None:
        raise ValueError(f"the search makes {kind} ops itself; it does not list their operands")
    if n == 1:
        return "unary"
    return "commutative" if kind in COMMUTATIVE_OPS else "ordered"


def operand_tuples(kind: OpKind, n: int) -> tuple[tuple[int, ...], ...]:
    """Every operand tuple of `kind` over n tensors, sorted lexicographically."""
    return new_tuples(arity(kind), 0, n)


@functools.lru_cache(maxsize=1 << 16)
def fast_shape(kind: OpKind, a: Shape, b: Shape | None) -> Shape | None:
    """Output shape of an op without attributes over operands of shapes `a` (and `b`), or None if
    they are invalid (no exception: this runs for every candidate, and a search meets few distinct
    shape pairs, so each is worked out once)."""
    family = PROPS[kind].family
    if family is Family.MATMUL:
        if b is None or len(a) != len(b) or len(a) < 2 or a[-1] != b[-2] or a[:-2] != b[:-2]:
            return None
        return a[:-1] + (b[-1],)
    if family is Family.BINARY:
        if b is None or len(a) != len(b):
            return None
        out = []
        for x, y in zip(a, b, strict=True):
            if x != y and x != 1 and y != 1:
                return None
            out.append(x if x > y else y)
        return tuple(out)
    if family is Family.UNARY or family is Family.NORM:
        return a if b is None else None
    raise ValueError(f"{kind}: its shape needs its attributes or the block graph (ir.shapes)")


@functools.lru_cache(maxsize=1 << 16)
def accumulator_shape(kind: AccumKind, a: Shape, rdx: int) -> Shape | None:
    try:
        return shapes.accumulator(kind, a, rdx)
    except IRError:
        return None


def _via_expr(kind: OpKind, args: Sequence[TInfo], attrs: Sequence[tuple[str, int | tuple[int, ...]]] = ()) -> E.Expr:
    op = Op(kind, tuple(range(len(args))), (), tuple(attrs))
    return E.op_expr(op, [a.expr for a in args], [a.shape for a in args])


@functools.cache
def term_maker(kind: OpKind, eps: float = 0.0) -> Callable[..., E.Expr]:
    """`op_term` for one kind without attrs (but a norm's `eps`), as a function of the operands'
    TInfos, with the dispatch on the kind done once (block tables make a term per entry): the
    commonest kinds build their term directly, the rest through `expr.op_expr`."""
    if kind not in PREDEFINED:
        raise ValueError(f"{kind} has no operand term maker: the search builds its term apart")
    match kind:
        case OpKind.MATMUL:
            return lambda a, b: E.matmul(a.expr, b.expr, a.shape[-1])
        case OpKind.ADD:
            return lambda a, b: E.add(a.expr, b.expr)
        case OpKind.MUL:
            return lambda a, b: E.mul(a.expr, b.expr)
        case OpKind.DIV:
            return lambda a, b: E.div(a.expr, b.expr)
        case OpKind.EXP | OpKind.SQRT | OpKind.SILU | OpKind.GELU | OpKind.GELU_ERF | OpKind.RELU | OpKind.CLAMP:
            head = E.UNARY_HEADS[kind]
            return lambda a: E.unary(head, a.expr)
        case OpKind.SQUARE:
            return lambda a: E.mul(a.expr, a.expr)
        case OpKind.MUL_SCALAR:
            return lambda a: a.expr
        case OpKind.RMS_NORM:
            if eps:
                return lambda a: E.div(a.expr, E.rms(a.shape[-1], a.expr, eps))
            return lambda a: E.div(a.expr, E.rms(a.shape[-1], a.expr))
        case OpKind.LAYER_NORM:
            return lambda a: E.layer_norm(a.shape[-1], a.expr, eps)
        case OpKind.REDUCTION | OpKind.CONCAT:
            return lambda *args: _via_expr(kind, args)
        case _ as unreachable:
            assert_never(unreachable)


def op_term(kind: OpKind, args: Sequence[TInfo], attrs: Sequence[tuple[str, int | tuple[int, ...]]] = ()) -> E.Expr:
    """The new tensor's term."""
    if attrs:
        return _via_expr(kind, args, attrs)
    return term_maker(kind)(*args)
