"""Rebuild the real IR graph of a search state, through the IR builder (so every rule is checked
again: a state the search accepted but the IR refuses is a bug, and the tests look for it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import assert_never

from mugraph.ir.graph import BlockGraph, KernelGraph, Tensor
from mugraph.ir.types import DType, OpKind
from mugraph.stages.search.state import BlockSpec, State


def _apply(
    g: KernelGraph | BlockGraph,
    kind: OpKind,
    args: Sequence[Tensor],
    attrs: dict[str, object],
    eps: Mapping[OpKind, float] | None = None,
) -> list[Tensor]:
    """The tensors one search op makes (the lora macro: the two concatenations and the product);
    the norms and accum_rms get the search's eps for their kind (`eps`, none: 0)."""
    e = (eps or {}).get(kind, 0.0)
    match kind:
        case OpKind.CONCAT if len(args) == 4:  # the lora macro
            r = len(args[0].shape)
            return [g.matmul(g.concat(args[0], args[1], r - 1), g.concat(args[2], args[3], r - 2))]
        case (
            OpKind.MATMUL
            | OpKind.ADD
            | OpKind.MUL
            | OpKind.DIV
            | OpKind.EXP
            | OpKind.SQUARE
            | OpKind.SQRT
            | OpKind.SILU
            | OpKind.GELU
            | OpKind.GELU_ERF
            | OpKind.RELU
        ):
            out = getattr(g, kind.value)(*args)  # the builder's method of the kind's name, no attributes
            assert isinstance(out, Tensor)
            return [out]
        case OpKind.RMS_NORM:
            return [g.rms_norm(args[0], e)]
        case OpKind.LAYER_NORM:
            return [g.layer_norm(args[0], e)]
        case OpKind.REDUCTION:
            return [g.reduction(args[0], _dim(attrs))]
        case OpKind.CONCAT:
            return [g.concat(args[0], args[1], _dim(attrs))]
        case OpKind.MUL_SCALAR:
            return [g.mul_scalar(args[0], _number(attrs["scalar"]))]
        case OpKind.CLAMP:
            return [g.clamp(args[0], _number(attrs["lo"]), _number(attrs["hi"]))]
        case OpKind.ACCUM_NO_RED | OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN | OpKind.ACCUM_RMS | OpKind.ACCUM_REDTOX:
            assert isinstance(g, BlockGraph)
            return [g.forloop_accum(args[0], kind, e)]
        case OpKind.INPUT | OpKind.OUTPUT | OpKind.CUSTOMIZED:
            raise ValueError(f"{kind} ops are built by build_graph itself")
        case _ as unreachable:
            assert_never(unreachable)


def _dim(attrs: dict[str, object]) -> int:
    dim = attrs["dim"]
    assert isinstance(dim, int)
    return dim


def _number(v: object) -> float:
    assert isinstance(v, int | float)
    return float(v)


def _block(
    g: KernelGraph, spec: BlockSpec, tensors: list[Tensor], rdx: int, eps: Mapping[OpKind, float] | None
) -> BlockGraph:
    bg = BlockGraph(spec.grid, spec.forloop, rdx=rdx)
    bt = [bg.new_input(tensors[i.source], i.imap, i.fmap) for i in spec.inputs]
    for op in spec.ops:
        outs = _apply(bg, op.kind, [bt[i] for i in op.inputs], dict(op.attrs), eps)
        if op.kind is OpKind.CONCAT and len(op.inputs) == 4:
            # the macro made three tensors; keep the search's indices
            bt += [bg.tensors[outs[0].index - 2], bg.tensors[outs[0].index - 1], outs[0]]
        else:
            bt += outs
    for i in spec.outputs:
        bg.new_output(bt[i], spec.omap)
    return bg


def build_graph(
    state: State,
    names: Sequence[str],
    outputs: Sequence[int] = (),
    output_names: Sequence[str] = (),
    rdx: int = 64,
    eps: Mapping[OpKind, float] | None = None,
    dtypes: Sequence[DType] = (),
) -> KernelGraph:
    """The kernel graph of a state with no open block graph; `outputs` (kernel tensor indices)
    are marked in order with `output_names`. `eps`: the eps of each norm kind (and accum_rms) the
    search made (none: 0); `dtypes`: the inputs' (the reference's; none: float16)."""
    g = KernelGraph()
    tensors: list[Tensor] = []
    for op in state.ops:
        match op.kind:
            case OpKind.INPUT:
                i = len(tensors)
                dtype = dtypes[i] if dtypes else DType.FLOAT16
                tensors.append(g.new_input(state.tensors[i].shape, dtype, name=names[i]))
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                bg = _block(g, op.block, tensors, rdx, eps)
                tensors += g.customized(bg, [tensors[i] for i in op.inputs])
            case kind:
                tensors += _apply(g, kind, [tensors[i] for i in op.inputs], dict(op.attrs), eps)
    for i, name in zip(outputs, output_names, strict=True):
        g.mark_output(tensors[i], name)
    return g
