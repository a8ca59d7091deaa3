"""The op-kind families: every kind in exactly one family with every property, and the sets the
passes narrow with agreeing with the table."""

from __future__ import annotations

from dataclasses import fields

import pytest

from mugraph.ir.errors import SchemaError
from mugraph.ir.families import (
    BOUNDARY,
    PREDEFINED,
    PROPS,
    CostClass,
    Family,
    OpProps,
    Reduces,
    family_of,
    kinds_of,
)
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, loads
from mugraph.ir.types import (
    ACCUMULATORS,
    BINARY_ELEMENTWISE_OPS,
    BLOCK_OPS,
    KERNEL_OPS,
    NORM_OPS,
    UNARY_OPS,
    OpKind,
)


def test_every_kind_is_in_exactly_one_family() -> None:
    assert set(PROPS) == set(OpKind)
    members = [kinds_of(f) for f in Family]
    assert sum(len(m) for m in members) == len(OpKind)
    assert frozenset().union(*members) == frozenset(OpKind)
    assert all(members), [f for f, m in zip(Family, members, strict=True) if not m]  # no empty family


@pytest.mark.parametrize("kind", list(OpKind), ids=str)
def test_every_kind_has_every_property(kind: OpKind) -> None:
    p = PROPS[kind]
    assert isinstance(p, OpProps)
    assert isinstance(p.family, Family) and isinstance(p.reduces, Reduces) and isinstance(p.cost_class, CostClass)
    assert p.arity is None or p.arity in (0, 1, 2)
    assert isinstance(p.exact_in_field, bool)
    # an op runs as array calls exactly when it is priced as array calls or one cuBLAS call
    assert (p.array_calls > 0) == (p.cost_class in (CostClass.ARRAY, CostClass.LIBRARY))
    assert {f.name for f in fields(OpProps)} <= set(dir(p))


def test_the_typed_sets_are_the_tables_families() -> None:
    """The `Literal` sets passes narrow with are the table's families, so neither can drift."""
    assert kinds_of(Family.UNARY) == UNARY_OPS
    assert kinds_of(Family.BINARY) == BINARY_ELEMENTWISE_OPS
    assert kinds_of(Family.NORM) == NORM_OPS
    assert kinds_of(Family.ACCUMULATOR) == ACCUMULATORS
    assert kinds_of(Family.BOUNDARY) == BOUNDARY
    assert {k for k, p in PROPS.items() if p.cost_class in (CostClass.ARRAY, CostClass.LIBRARY)} == PREDEFINED
    assert frozenset(OpKind) - ACCUMULATORS == KERNEL_OPS
    assert frozenset(OpKind) - {OpKind.CUSTOMIZED} == BLOCK_OPS


def test_families_match_what_the_kinds_do() -> None:
    assert family_of(OpKind.MATMUL) is Family.MATMUL
    assert {k for k, p in PROPS.items() if p.reduces is Reduces.DIM} == {OpKind.REDUCTION}
    assert {k for k, p in PROPS.items() if p.arity == 2} == BINARY_ELEMENTWISE_OPS | {OpKind.MATMUL, OpKind.CONCAT}
    assert {k for k, p in PROPS.items() if p.arity is None} == {OpKind.CUSTOMIZED}
    assert all(not PROPS[k].exact_in_field for k in (OpKind.EXP, OpKind.SQRT, OpKind.RELU, OpKind.ACCUM_RMS))


def test_a_json_op_with_the_wrong_arity_is_refused_by_the_tables_arity() -> None:
    g = KernelGraph()
    x = g.new_input((4, 4), name="X")
    g.mark_output(g.exp(x), "O")
    text = dumps(g).replace('{"inputs":[0],"kind":"exp"}', '{"inputs":[0,0],"kind":"exp"}')
    assert '"inputs":[0,0]' in text
    with pytest.raises(SchemaError, match="exp takes 1 inputs, got 2"):
        loads(text)
