"""The search's fast term makers build the same term as the general `expr.op_expr`."""

from __future__ import annotations

import pytest

from mugraph.ir.graph import Op
from mugraph.ir.types import OpKind
from mugraph.stages.prune import expr as E
from mugraph.stages.search.op_results import arity, term_maker
from mugraph.stages.search.state import TInfo

KINDS = [
    k
    for k in OpKind
    if k not in (OpKind.INPUT, OpKind.OUTPUT, OpKind.CUSTOMIZED, OpKind.REDUCTION, OpKind.CONCAT)
    and not k.name.startswith("ACCUM")
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_term_maker_matches_op_expr(kind: OpKind) -> None:
    a = TInfo((8, 16), E.add(E.var(0), E.var(2)))
    b = TInfo((16, 4), E.unary(E.UNARY_HEADS[OpKind.EXP], E.var(1)))
    args = [a] if arity(kind) == "unary" else [a, b]
    general = E.op_expr(Op(kind, tuple(range(len(args))), ()), [t.expr for t in args], [t.shape for t in args])
    assert term_maker(kind)(*args) is general  # terms are hash-consed: equal means the same object
