"""Enumerations of the IR. Values are strings so stored graphs never depend on enum numbering."""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal, get_args

Shape = tuple[int, ...]
Dim3 = tuple[int, int, int]

MAX_DIMS = 4


class DType(StrEnum):
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"

    @property
    def itemsize(self) -> int:
        return 4 if self is DType.FLOAT32 else 2


class OpKind(StrEnum):
    """Every operator of kernel and block graphs; which level allows which is below."""

    INPUT = "input"
    OUTPUT = "output"
    MATMUL = "matmul"
    EXP = "exp"
    SQUARE = "square"
    SQRT = "sqrt"
    MUL_SCALAR = "mul_scalar"
    SILU = "silu"
    GELU = "gelu"  # the tanh form
    GELU_ERF = "gelu_erf"  # the exact form, x·Φ(x): PyTorch's default
    RELU = "relu"
    CLAMP = "clamp"
    ADD = "add"
    MUL = "mul"
    DIV = "div"
    REDUCTION = "reduction"
    RMS_NORM = "rms_norm"
    CONCAT = "concat"
    CUSTOMIZED = "customized"
    ACCUM_NO_RED = "accum_no_red"
    ACCUM_SUM = "accum_sum"
    ACCUM_MEAN = "accum_mean"
    ACCUM_RMS = "accum_rms"
    ACCUM_REDTOX = "accum_redtox"
    # Appended last: the search ranks ops by their kind's position in this enum, so a kind added
    # earlier would reorder every existing search tree.
    LAYER_NORM = "layer_norm"


UNARY_OPS = frozenset(
    {
        OpKind.EXP,
        OpKind.SQUARE,
        OpKind.SQRT,
        OpKind.MUL_SCALAR,
        OpKind.SILU,
        OpKind.GELU,
        OpKind.GELU_ERF,
        OpKind.RELU,
        OpKind.CLAMP,
    }
)
BINARY_ELEMENTWISE_OPS = frozenset({OpKind.ADD, OpKind.MUL, OpKind.DIV})
COMMUTATIVE_OPS = frozenset({OpKind.ADD, OpKind.MUL})
# The for-loop accumulators, defined once as a type: the functions that act on an accumulator (its
# shape, term and values) take an `AccumKind` and match its kinds exhaustively; a caller narrows an
# `OpKind` first with `kind in ACCUMULATORS`, which mypy reads as narrowing to `AccumKind`.
AccumKind = Literal[
    OpKind.ACCUM_NO_RED,
    OpKind.ACCUM_SUM,
    OpKind.ACCUM_MEAN,
    OpKind.ACCUM_RMS,
    OpKind.ACCUM_REDTOX,
]
ACCUMULATORS: Final[frozenset[AccumKind]] = frozenset(get_args(AccumKind))
_COMMON = (
    frozenset({OpKind.INPUT, OpKind.OUTPUT, OpKind.MATMUL, OpKind.REDUCTION})
    | frozenset({OpKind.RMS_NORM, OpKind.LAYER_NORM, OpKind.CONCAT})
    | UNARY_OPS
    | BINARY_ELEMENTWISE_OPS
)
KERNEL_OPS = _COMMON | {OpKind.CUSTOMIZED}
BLOCK_OPS = _COMMON | ACCUMULATORS
# Ops whose output may reuse the input's shared memory (Mirage's accounting counts them as 0 bytes).
IN_PLACE_BLOCK_OPS = UNARY_OPS | {OpKind.ACCUM_NO_RED}
# The normalisations over the last dim, each with an `eps` attribute (stored only when not 0).
NORM_OPS = frozenset({OpKind.RMS_NORM, OpKind.LAYER_NORM})
# Ops outside LAX (cut points for fragments).
NON_LAX_OPS = frozenset({OpKind.RELU, OpKind.CLAMP})
