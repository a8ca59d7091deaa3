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
from typing import assert_never

from mugraph.ir.errors import MugraphError
from mugraph.ir.families import Family, Reduces, props
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.ir.types import OpKind, Shape

TensorKey = tuple[int, int]
KERNEL = -1


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
        match op.kind:
            case OpKind.INPUT | OpKind.OUTPUT:
                key = (KERNEL, op.outputs[0] if op.kind is OpKind.INPUT else op.inputs[0])
                dim = _user_dim(str(op.attr("name")), len(f.shapes[key]), io)
                if f.fixed.get(key, dim) != dim:
                    raise LayoutError(f"tensor {op.attr('name')!r} is given two different innermost dims")
                f.fixed[key] = dim
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                _block_facts(f, op_index, op.block, op.inputs, op.outputs)
            case _:
                _op_facts(f, KERNEL, op.kind, op.inputs, op.outputs, op.attrs)
    return f


def _block_facts(
    f: LayoutFacts, op_index: int, bg: BlockGraph, inputs: tuple[int, ...], outputs: tuple[int, ...]
) -> None:
    """The facts of the block graph of kernel op `op_index`: its tensors, its tile copies, its ops'."""
    f.static_smem[op_index] = bg.smem_bytes
    for t in bg.tensors:
        f.shapes[(op_index, t.index)] = t.shape
        f.itemsize[(op_index, t.index)] = t.dtype.itemsize
    n_in = n_out = 0
    for bop in bg.ops:
        match bop.kind:
            case OpKind.INPUT:
                f.copies.append(Copy((op_index, bop.outputs[0]), (KERNEL, inputs[n_in]), "input"))
                n_in += 1
            case OpKind.OUTPUT:
                f.copies.append(Copy((op_index, bop.inputs[0]), (KERNEL, outputs[n_out]), "output"))
                n_out += 1
            case _:
                _op_facts(f, op_index, bop.kind, bop.inputs, bop.outputs, bop.attrs)


def _op_facts(
    f: LayoutFacts,
    level: int,
    kind: OpKind,
    inputs: tuple[int, ...],
    outputs: tuple[int, ...],
    attrs: tuple[tuple[str, object], ...],
) -> None:
    """A computing op's constraints: a matmul's operands and result keep their last two dims whole
    (and a block matmul's operands are read by `ldmatrix`); an op whose output has its input's shape,
    or that shape with dims reduced, keeps its input's innermost dim; a reduction records the dim
    it reduces."""
    ins = [(level, i) for i in inputs]
    outs = [(level, i) for i in outputs]
    kind_props = props(kind)
    match kind_props.family:
        case Family.MATMUL:
            f.last_two.extend([*ins, *outs])
            if level != KERNEL:
                f.mm_operands.extend(ins)
        case Family.UNARY | Family.REDUCTION | Family.NORM | Family.ACCUMULATOR:
            f.same_inner.append((ins[0], outs[0]))
            match kind_props.reduces:
                case Reduces.NO:
                    pass
                case Reduces.DIM:
                    f.reductions.append((ins[0], int(dict(attrs)["dim"])))  # type: ignore[call-overload]
                case Reduces.LAST:
                    f.reductions.append((ins[0], len(f.shapes[ins[0]]) - 1))
                case _ as unreachable_reduces:
                    assert_never(unreachable_reduces)
        case Family.BINARY | Family.DATA_MOVEMENT:
            pass  # no constraint between the operands' and the result's layouts
        case Family.BOUNDARY | Family.GRAPH_DEFINED:
            raise ValueError(f"{kind} has no op facts: gather handles inputs, outputs and graph-defined ops")
        case _ as unreachable:
            assert_never(unreachable)
