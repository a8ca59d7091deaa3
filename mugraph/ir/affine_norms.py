"""A norm with its weight and bias, as PyTorch runs it: one call.

PyTorch runs `F.layer_norm(x, shape, w, b)` (`nn.LayerNorm`) as one kernel that reads x and the two
vectors and writes the result, and `F.rms_norm(x, shape, w)` (`nn.RMSNorm`) likewise with its weight.
The torch lowering (`torch/norms.py`) turns each into the IR's norm followed by an element-wise mul by
the weight and an add of the bias, each a vector over the last dim: three ops where PyTorch runs one.
The optimised module runs each such chain its program keeps as that one call (`torch/kernels.py`), and
the PyTorch cost model prices it so (`stages/layout/emitted.py`), in a μGraph as in the reference.

The chain: a norm whose output has no reader but a mul by a weight vector (dims of 1, then the
norm's last dim; the norm's dtype), and/or then (layer_norm only: `F.rms_norm` takes no bias) an add
of such a bias vector, each step's output read by the next alone. A norm written out in the model's
code (six ATen calls PyTorch runs one by one) is lowered to the same ops, and is priced and run the
same: below what the model runs, never above.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind

# per norm, the element-wise steps PyTorch's own norm call takes in, in order
STEPS: Mapping[OpKind, tuple[OpKind, ...]] = {
    OpKind.LAYER_NORM: (OpKind.MUL, OpKind.ADD),
    OpKind.RMS_NORM: (OpKind.MUL,),
}


@dataclass(frozen=True, slots=True)
class AffineNorm:
    """A norm and the weight mul and/or bias add one PyTorch call runs with it."""

    norm: int  # the norm's op index
    absorbed: tuple[int, ...]  # the mul and/or add op indices the call takes in
    tensors: tuple[int, ...]  # what the call reads and writes: x, the weight and bias vectors, the result


def affine_norms(g: KernelGraph) -> dict[int, AffineNorm]:
    """Every norm of `g` with a weight or bias PyTorch's norm call would take in, by the norm's op index."""
    readers: defaultdict[int, list[int]] = defaultdict(list)
    for index, op in enumerate(g.ops):
        for t in op.inputs:
            readers[t].append(index)
    found = {}
    for index, op in enumerate(g.ops):
        steps = STEPS.get(op.kind)
        if steps is None:
            continue
        y = op.outputs[0]
        absorbed: list[int] = []
        vectors: list[int] = []
        for kind in steps:
            step = _step(g, readers[y], y, kind)
            if step is None:
                continue  # no weight: a bias may still follow the norm itself
            absorbed.append(step[0])
            vectors.append(step[1])
            y = g.ops[step[0]].outputs[0]
        if absorbed:
            found[index] = AffineNorm(index, tuple(absorbed), (*op.inputs, *vectors, y))
    return found


def _step(g: KernelGraph, readers: Sequence[int], y: int, kind: OpKind) -> tuple[int, int] | None:
    """(op index, vector) where `y`'s one reader is a `kind` of y and a vector over y's last dim; a
    graph output reads its tensor too, so an output norm keeps its weight apart."""
    if len(readers) != 1 or g.ops[readers[0]].kind is not kind:
        return None
    op = g.ops[readers[0]]
    others = [t for t in op.inputs if t != y]
    if len(op.inputs) != 2 or len(others) != 1:  # y * y reads y twice
        return None
    v, t = g.tensors[others[0]], g.tensors[y]
    vector = v.shape[-1:] == t.shape[-1:] and all(s == 1 for s in v.shape[:-1])  # operands share a rank
    if not vector or v.dtype is not t.dtype or g.tensors[op.outputs[0]].shape != t.shape:
        return None
    return readers[0], others[0]
