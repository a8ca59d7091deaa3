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


# The families of op kinds, each declared once as a type (`ir/families.py` names them and gives each
# kind's properties): a pass narrows an `OpKind` with `kind in SET` (mypy reads a `Final` frozenset of
# a `Literal` as narrowing to it) and then matches that family's kinds exhaustively.
BoundaryKind = Literal[OpKind.INPUT, OpKind.OUTPUT]
UnaryKind = Literal[
    OpKind.EXP,
    OpKind.SQUARE,
    OpKind.SQRT,
    OpKind.MUL_SCALAR,
    OpKind.SILU,
    OpKind.GELU,
    OpKind.GELU_ERF,
    OpKind.RELU,
    OpKind.CLAMP,
]
BinaryKind = Literal[OpKind.ADD, OpKind.MUL, OpKind.DIV]
# The normalisations over the last dim, each with an `eps` attribute (stored only when not 0).
NormKind = Literal[OpKind.RMS_NORM, OpKind.LAYER_NORM]
UNARY_OPS: Final[frozenset[UnaryKind]] = frozenset(get_args(UnaryKind))
BINARY_ELEMENTWISE_OPS: Final[frozenset[BinaryKind]] = frozenset(get_args(BinaryKind))
NORM_OPS: Final[frozenset[NormKind]] = frozenset(get_args(NormKind))
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
    | NORM_OPS
    | {OpKind.CONCAT}
    | UNARY_OPS
    | BINARY_ELEMENTWISE_OPS
)
KERNEL_OPS = _COMMON | {OpKind.CUSTOMIZED}
BLOCK_OPS = _COMMON | ACCUMULATORS
# Ops whose output may reuse the input's shared memory (Mirage's accounting counts them as 0 bytes).
IN_PLACE_BLOCK_OPS = UNARY_OPS | {OpKind.ACCUM_NO_RED}
# Ops outside LAX (cut points for fragments).
NON_LAX_OPS = frozenset({OpKind.RELU, OpKind.CLAMP})
