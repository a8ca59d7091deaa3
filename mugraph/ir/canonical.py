"""A μGraph's canonical digest: equal for graphs that differ only in how they are written down.

The digest hashes each tensor by what computes it (op kind, attributes, the hashes of its inputs,
sorted for add and mul), never by its index, so it ignores the listing order of independent
ops, the operand order of commutative ops, and the order of a block graph's outputs (each
graph-defined op's output is hashed through the block graph and its own content). Inputs are
hashed by position, kind and shape; the kernel graph's outputs in order. The search uses it to
report each μGraph once (of two finds, the one at the smaller path) and to say whether the expert
was found.
"""

from __future__ import annotations

import hashlib
import json

from mugraph.ir.graph import BlockGraph, KernelGraph, Op
from mugraph.ir.types import COMMUTATIVE_OPS, OpKind


def _h(*parts: object) -> str:
    text = json.dumps(parts, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _attrs(op: Op, skip: tuple[str, ...] = ()) -> list[object]:
    return [[k, list(v) if isinstance(v, tuple) else v] for k, v in op.attrs if k not in skip]


def _op_hash(op: Op, args: list[str]) -> str:
    if op.kind in COMMUTATIVE_OPS:
        args = sorted(args)
    return _h(op.kind.value, _attrs(op), args)


def _block_hashes(bg: BlockGraph, sources: list[str]) -> list[str]:
    """The hash of each output of a block graph, in its output order."""
    h: dict[int, str] = {}
    n_in = 0
    outs: list[tuple[str, object]] = []
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                h[op.outputs[0]] = _h("in", sources[n_in], _attrs(op))
                n_in += 1
            case OpKind.OUTPUT:
                outs.append((h[op.inputs[0]], op.attr("omap")))
            case _:
                h[op.outputs[0]] = _op_hash(op, [h[i] for i in op.inputs])
    inputs = sorted(h[op.outputs[0]] for op in bg.ops if op.kind is OpKind.INPUT)
    body = _h("block", list(bg.grid), list(bg.block), bg.forloop, bg.rdx, inputs, sorted(outs))
    return [_h("out", body, o, m) for o, m in outs]


def canonical_digest(graph: KernelGraph) -> str:
    h: dict[int, str] = {}
    n_in = 0
    for op in graph.ops:
        match op.kind:
            case OpKind.INPUT:
                t = graph.tensors[op.outputs[0]]
                h[op.outputs[0]] = _h("input", n_in, list(t.shape), t.dtype.value)
                n_in += 1
            case OpKind.OUTPUT:
                pass
            case OpKind.CUSTOMIZED:
                assert op.block is not None
                h.update(zip(op.outputs, _block_hashes(op.block, [h[i] for i in op.inputs]), strict=True))
            case _:
                h[op.outputs[0]] = _op_hash(op, [h[i] for i in op.inputs])
    outputs = [h[t.index] for t in graph.output_tensors]
    return hashlib.sha256(json.dumps(["mugraph.canonical/1", outputs]).encode()).hexdigest()


def replaces_find(path: tuple[int, ...], kept: tuple[int, ...] | None) -> bool:
    """Whether a find of a μGraph at search path `path` replaces the find of the same canonical
    digest kept at `kept` (None: none yet). The smaller path is kept, so what a run reports does not
    depend on the order its tasks finish in, nor on which attempt of a task wrote last."""
    return kept is None or path < kept
