"""The structural facts of a μGraph that layout selection depends on, gathered once.

Both the Z3 problem (`choose.py`) and the plain evaluation of a given layout (`costs.py`) read these
facts, so the solver and the reported cost terms cannot drift apart.

A tensor is named by a `TensorKey`: `(-1, i)` is device tensor i of the kernel graph, `(op, i)` is
shared-memory tensor i of the block graph of kernel op `op`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import prod

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import ACCUMULATORS, OpKind, Shape

TensorKey = tuple[int, int]
KERNEL = -1

# Ops whose output must keep its input's innermost dim (same shape, or the shape with reduced dims).
_KEEP_INNER = (
    frozenset(
        {
            OpKind.EXP,
            OpKind.SQUARE,
            OpKind.SQRT,
            OpKind.MUL_SCALAR,
            OpKind.SILU,
            OpKind.GELU,
            OpKind.RELU,
            OpKind.GELU_ERF,
            OpKind.CLAMP,
            OpKind.REDUCTION,
            OpKind.RMS_NORM,
        }
    )
    | ACCUMULATORS
)
# Ops that reduce over the last dim.
_REDUCE_LAST = frozenset({OpKind.RMS_NORM, OpKind.ACCUM_SUM, OpKind.ACCUM_MEAN, OpKind.ACCUM_RMS, OpKind.ACCUM_REDTOX})


class LayoutError(MugraphError):
    """The layout constraints cannot all hold (for example a user stride that a matmul forbids)."""


@dataclass(frozen=True, slots=True)
class Copy:
    """A block graph's input (device → shared) or output (shared → device) tile copy."""

    stensor: TensorKey
    dtensor: TensorKey
    direction: str  # "input" | "output"


@dataclass
class LayoutFacts:
    shapes: dict[TensorKey, Shape] = field(default_factory=dict)
    itemsize: dict[TensorKey, int] = field(default_factory=dict)
    fixed: dict[TensorKey, int] = field(default_factory=dict)  # user strides on inputs and outputs
    same_inner: list[tuple[TensorKey, TensorKey]] = field(default_factory=list)
    last_two: list[TensorKey] = field(default_factory=list)  # matmul operands and results
    reductions: list[tuple[TensorKey, int]] = field(default_factory=list)  # (input, reduced dim)
    copies: list[Copy] = field(default_factory=list)
    mm_operands: list[TensorKey] = field(default_factory=list)  # block matmul operands, one per use
    static_smem: dict[int, int] = field(default_factory=dict)  # block op → Mirage's smem estimate

    def is_block(self, key: TensorKey) -> bool:
        return key[0] != KERNEL

    def rows(self, key: TensorKey, inner: int) -> int:
        """How many rows of contiguous elements a tensor has when `inner` is its innermost dim."""
        shape = self.shapes[key]
        return prod(shape) // shape[inner]


def _user_dim(name: str, rank: int, io_layouts: Mapping[str, int]) -> int:
    dim = io_layouts.get(name, rank - 1)
    if not isinstance(dim, int) or isinstance(dim, bool) or not -rank <= dim < rank:
        raise LayoutError(f"layout of {name!r}: innermost dim {dim!r} is not a dim of a rank-{rank} tensor")
    return dim % rank


def gather(graph: KernelGraph, io_layouts: Mapping[str, int] | None = None) -> LayoutFacts:
    """Facts of `graph`. `io_layouts` maps input and output names to their innermost dim (the user's
    strides); a name not given is row-major (its last dim innermost)."""
    io = dict(io_layouts or {})
    f = LayoutFacts()
    for t in graph.tensors:
        f.shapes[(KERNEL, t.index)] = t.shape
        f.itemsize[(KERNEL, t.index)] = t.dtype.itemsize
    for op_index, op in enumerate(graph.ops):
        if op.kind is OpKind.INPUT or op.kind is OpKind.OUTPUT:
            key = (KERNEL, op.outputs[0] if op.kind is OpKind.INPUT else op.inputs[0])
            dim = _user_dim(str(op.attr("name")), len(f.shapes[key]), io)
            if f.fixed.get(key, dim) != dim:
                raise LayoutError(f"tensor {op.attr('name')!r} is given two different innermost dims")
            f.fixed[key] = dim
            continue
        _op_facts(f, KERNEL, op.kind, op.inputs, op.outputs, op.attrs)
        if op.kind is not OpKind.CUSTOMIZED:
            continue
        bg = op.block
        assert bg is not None
        f.static_smem[op_index] = bg.smem_bytes
        for t in bg.tensors:
            f.shapes[(op_index, t.index)] = t.shape
            f.itemsize[(op_index, t.index)] = t.dtype.itemsize
        n_in = n_out = 0
        for bop in bg.ops:
            if bop.kind is OpKind.INPUT:
                f.copies.append(Copy((op_index, bop.outputs[0]), (KERNEL, op.inputs[n_in]), "input"))
                n_in += 1
            elif bop.kind is OpKind.OUTPUT:
                f.copies.append(Copy((op_index, bop.inputs[0]), (KERNEL, op.outputs[n_out]), "output"))
                n_out += 1
            else:
                _op_facts(f, op_index, bop.kind, bop.inputs, bop.outputs, bop.attrs)
                if bop.kind is OpKind.MATMUL:
                    f.mm_operands.extend((op_index, i) for i in bop.inputs)
    return f


def _op_facts(
    f: LayoutFacts,
    level: int,
    kind: OpKind,
    inputs: tuple[int, ...],
    outputs: tuple[int, ...],
    attrs: tuple[tuple[str, object], ...],
) -> None:
    ins = [(level, i) for i in inputs]
    outs = [(level, i) for i in outputs]
    if kind is OpKind.MATMUL:
        f.last_two.extend([*ins, *outs])
    elif kind in _KEEP_INNER:
        f.same_inner.append((ins[0], outs[0]))
    if kind is OpKind.REDUCTION:
        f.reductions.append((ins[0], int(dict(attrs)["dim"])))  # type: ignore[call-overload]
    elif kind in _REDUCE_LAST:
        f.reductions.append((ins[0], len(f.shapes[ins[0]]) - 1))
