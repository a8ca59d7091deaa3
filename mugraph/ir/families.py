"""The families of op kinds and each kind's properties, as data in one place.

A pass that treats the members of a family alike asks for the family (or a property) here instead of
listing the kinds again, so a new kind is added to its family's `Literal` in `types.py` and to the
table below, and mypy and `tests/ir/test_families.py` name every pass that must still handle it on its
own. Membership is a `Literal` type (in `types.py`, next to `OpKind`) so that `kind in SET` narrows a
kind for an exhaustive `match` of its family; the table gives every kind every property.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final, Literal, get_args

from mugraph.ir.types import BinaryKind, BoundaryKind, NormKind, OpKind, UnaryKind


class Family(StrEnum):
    """What a kind does, as the passes group it."""

    BOUNDARY = "boundary"  # input, output: where a graph's tensors enter and leave
    GRAPH_DEFINED = "graph_defined"  # customized: a block graph run as one kernel
    UNARY = "unary"  # element-wise on one operand
    BINARY = "binary"  # element-wise on two operands of one shape
    MATMUL = "matmul"
    REDUCTION = "reduction"  # a sum over the dim its `dim` attribute names
    NORM = "norm"  # a normalisation over the last dim, with an `eps`
    DATA_MOVEMENT = "data_movement"  # concat: moves values, computes none
    ACCUMULATOR = "accumulator"  # a block graph's for-loop accumulation


class Reduces(StrEnum):
    """Which dim of its input an op reduces (its output keeps the input's innermost dim either way)."""

    NO = "no"
    DIM = "dim"  # the dim its `dim` attribute names
    LAST = "last"  # the last dim


class CostClass(StrEnum):
    """What the emitted module runs for the kind, which is how a cost model prices it."""

    FREE = "free"  # no kernel of its own (an input or output)
    LIBRARY = "library"  # one cuBLAS call
    ARRAY = "array"  # CuPy element-wise or reduction calls
    TRITON = "triton"  # one generated Triton kernel (a graph-defined op)
    IN_BLOCK = "in_block"  # only inside a block graph, priced with the kernel that holds it


@dataclass(frozen=True, slots=True)
class OpProps:
    """One kind's properties. `arity` is None where the graph-defined op's block graph decides it;
    `exact_in_field` says whether the finite-field rule is the op's own arithmetic (ring operations
    and rational scaling) rather than a surrogate that keeps only the identities the search relies on
    (exp as ω^x, a chosen square root, relu's half range); a graph-defined op is as exact as its block
    ops. `array_calls` counts the array calls the emitted module makes for it as a pre-defined kernel
    op (0 where it is not one)."""

    family: Family
    arity: int | None
    reduces: Reduces
    exact_in_field: bool
    cost_class: CostClass
    array_calls: int


def _unary(exact: bool, calls: int = 1) -> OpProps:
    return OpProps(Family.UNARY, 1, Reduces.NO, exact, CostClass.ARRAY, calls)


def _accum(reduces: Reduces, exact: bool) -> OpProps:
    return OpProps(Family.ACCUMULATOR, 1, reduces, exact, CostClass.IN_BLOCK, 0)


_BINARY = OpProps(Family.BINARY, 2, Reduces.NO, True, CostClass.ARRAY, 1)

PROPS: Final[Mapping[OpKind, OpProps]] = MappingProxyType(
    {
        OpKind.INPUT: OpProps(Family.BOUNDARY, 0, Reduces.NO, True, CostClass.FREE, 0),
        OpKind.OUTPUT: OpProps(Family.BOUNDARY, 1, Reduces.NO, True, CostClass.FREE, 0),
        OpKind.MATMUL: OpProps(Family.MATMUL, 2, Reduces.NO, True, CostClass.LIBRARY, 1),
        OpKind.EXP: _unary(exact=False),
        OpKind.SQUARE: _unary(exact=True),
        OpKind.SQRT: _unary(exact=False),
        OpKind.MUL_SCALAR: _unary(exact=True),
        OpKind.SILU: _unary(exact=False, calls=4),  # neg, exp, add, div
        OpKind.GELU: _unary(exact=False, calls=7),
        OpKind.GELU_ERF: _unary(exact=False),
        OpKind.RELU: _unary(exact=False),
        OpKind.CLAMP: _unary(exact=False),
        OpKind.ADD: _BINARY,
        OpKind.MUL: _BINARY,
        OpKind.DIV: _BINARY,
        OpKind.REDUCTION: OpProps(Family.REDUCTION, 1, Reduces.DIM, True, CostClass.ARRAY, 1),
        OpKind.RMS_NORM: OpProps(Family.NORM, 1, Reduces.LAST, False, CostClass.ARRAY, 4),  # square, mean, sqrt, div
        OpKind.CONCAT: OpProps(Family.DATA_MOVEMENT, 2, Reduces.NO, True, CostClass.ARRAY, 1),
        OpKind.CUSTOMIZED: OpProps(Family.GRAPH_DEFINED, None, Reduces.NO, True, CostClass.TRITON, 0),
        OpKind.ACCUM_NO_RED: _accum(Reduces.NO, exact=True),
        OpKind.ACCUM_SUM: _accum(Reduces.LAST, exact=True),
        OpKind.ACCUM_MEAN: _accum(Reduces.LAST, exact=True),
        OpKind.ACCUM_RMS: _accum(Reduces.LAST, exact=False),
        OpKind.ACCUM_REDTOX: _accum(Reduces.LAST, exact=True),
        OpKind.LAYER_NORM: OpProps(Family.NORM, 1, Reduces.LAST, False, CostClass.ARRAY, 6),
    }
)


def props(kind: OpKind) -> OpProps:
    return PROPS[kind]


def family_of(kind: OpKind) -> Family:
    return PROPS[kind].family


def kinds_of(*families: Family) -> frozenset[OpKind]:
    """The kinds of the given families."""
    return frozenset(k for k, p in PROPS.items() if p.family in families)


# The kinds a kernel op computes with one pre-defined function (an array call, a cuBLAS matmul): the
# ones every interpreter, emitter and cost rule of a single op handles kind by kind. The rest are
# boundaries, graph-defined ops and accumulators, which the walks over a graph handle themselves.
PredefinedKind = Literal[
    UnaryKind,
    BinaryKind,
    NormKind,
    OpKind.MATMUL,
    OpKind.REDUCTION,
    OpKind.CONCAT,
]
PREDEFINED: Final[frozenset[PredefinedKind]] = frozenset(get_args(PredefinedKind))
# Where a graph's tensors enter and leave: the ops that compute nothing.
BOUNDARY: Final[frozenset[BoundaryKind]] = frozenset(get_args(BoundaryKind))
