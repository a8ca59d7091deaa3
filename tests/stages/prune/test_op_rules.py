"""The expression rules refuse, by name, the kinds that another rule or the graph walks handle."""

from __future__ import annotations

from typing import cast

import pytest

from mugraph.ir.graph import Op
from mugraph.ir.types import ACCUMULATORS, AccumKind, OpKind
from mugraph.stages.prune.expr import accumulator_expr, op_expr, var


@pytest.mark.parametrize("kind", sorted(ACCUMULATORS | {OpKind.INPUT, OpKind.OUTPUT, OpKind.CUSTOMIZED}))
def test_op_expr_leaves_structure_and_accumulators_to_the_walks(kind: OpKind) -> None:
    with pytest.raises(ValueError, match=f"{kind} has no rule in op_expr"):
        op_expr(Op(kind, (0,), (1,)), [var(0)], [(4, 4)])


@pytest.mark.parametrize("kind", sorted(set(OpKind) - ACCUMULATORS))
def test_accumulator_expr_refuses_every_other_kind(kind: OpKind) -> None:
    """Only an accumulator kind type-checks; another one cast past the checker still fails loudly."""
    with pytest.raises(AssertionError, match="unreachable"):
        accumulator_expr(cast(AccumKind, kind), var(0), (4, 64), 2, 16)
