"""A readable text rendering of kernel graphs with their block graphs."""

from __future__ import annotations

from mugraph.ir.graph import BlockGraph, KernelGraph, Op, Tensor
from mugraph.ir.shapes import fmt
from mugraph.ir.types import OpKind

_ORDER = {"imap": 0, "fmap": 1, "omap": 2}


def _attrs(op: Op) -> str:
    """Attributes as `key=value`, maps in the order imap, fmap, omap."""
    parts = []
    for key, value in sorted(op.attrs, key=lambda kv: (_ORDER.get(kv[0], 3), kv[0])):
        shown = "(" + ",".join(str(v) for v in value) + ")" if isinstance(value, tuple) else value
        parts.append(f"{key}={shown}")
    return (" " + " ".join(parts)) if parts else ""


def _names(prefix: str, idx: tuple[int, ...]) -> str:
    return ", ".join(f"{prefix}{i}" for i in idx)


def _tensor(t: Tensor) -> str:
    mark = " *" if t.after_accum else ""
    return f"{fmt(t.shape)}{mark}"


def _block_lines(bg: BlockGraph, srcs: tuple[int, ...], indent: str) -> list[str]:
    lines = [
        f"{indent}grid=({','.join(map(str, bg.grid))}) block=({','.join(map(str, bg.block))}) "
        f"forloop={bg.forloop} rdx={bg.rdx} smem={bg.smem_bytes}B"
    ]
    n_in = 0
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                s = bg.tensors[op.outputs[0]]
                lines.append(f"{indent}s{s.index} = input t{srcs[n_in]}{_attrs(op)}  {_tensor(s)}")
                n_in += 1
            case OpKind.OUTPUT:
                lines.append(f"{indent}output {_names('s', op.inputs)}{_attrs(op)}")
            case _:
                outs = ", ".join(f"s{i}" for i in op.outputs)
                shape = _tensor(bg.tensors[op.outputs[0]])
                lines.append(f"{indent}{outs} = {op.kind}({_names('s', op.inputs)}){_attrs(op)}  {shape}")
    return lines


def render(graph: KernelGraph, title: str | None = None) -> str:
    """One line per op; block graphs indented under their graph-defined op; `*` marks tensors
    after the for-loop accumulation."""
    lines = [title] if title else []
    for op in graph.ops:
        match op.kind:
            case OpKind.INPUT:
                t = graph.tensors[op.outputs[0]]
                lines.append(f"  t{t.index} = input {op.attr('name')} {fmt(t.shape)} {t.dtype}")
            case OpKind.OUTPUT:
                t = graph.tensors[op.inputs[0]]
                lines.append(f"  output t{t.index} as {op.attr('name')} {fmt(t.shape)}")
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                outs = ", ".join(f"t{i} {fmt(graph.tensors[i].shape)}" for i in op.outputs)
                lines.append(f"  {outs} = customized({_names('t', op.inputs)})")
                lines.extend(_block_lines(op.block, op.inputs, "      "))
            case _:
                t = graph.tensors[op.outputs[0]]
                lines.append(f"  t{t.index} = {op.kind}({_names('t', op.inputs)}){_attrs(op)}  {fmt(t.shape)}")
    return "\n".join(lines)
