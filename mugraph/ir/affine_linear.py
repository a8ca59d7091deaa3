"""A matmul with its bias, as PyTorch runs it: one call.

PyTorch runs `F.linear(x, W, b)` (`nn.Linear` with a bias) and `torch.addmm(b, x, W.T)` (GPT-2's
`Conv1D`) as one cuBLAS call that adds the bias vector as it writes the product. The torch lowering
(`torch/lower_matmul.py`) turns each into the IR's matmul followed by an element-wise add of the bias,
a vector over the output's last dim: two ops, the add a second pass over the whole output where
PyTorch makes none. The optimised module runs each such pair its program keeps as that one call
(`torch/kernels.py`), and the PyTorch cost model prices it so (`stages/layout/emitted.py`), in a μGraph
as in the reference.

The pair: a matmul of matrices (no batch dim above 1: `torch.baddbmm` copies a broadcast bias over the
whole output first, a pass of its own) whose output has no reader but an add of a bias vector (dims of
1, then the output's last dim; the same dtype), the sum of the output's shape. An add another rule has
taken in (a norm's bias, `affine_norms.py`) is left to it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from math import prod

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind


@dataclass(frozen=True, slots=True)
class LinearBias:
    """A matmul and the bias add one PyTorch call runs with it."""

    matmul: int  # the matmul's op index
    add: int  # the add's op index
    tensors: tuple[int, ...]  # what the call reads and writes: x, the weight, the bias vector, the result


def linear_biases(g: KernelGraph, taken: Collection[int] = ()) -> dict[int, LinearBias]:
    """Every matmul of `g` with a bias PyTorch's one call would take in, by the matmul's op index;
    `taken`: op indices another rule took in, never claimed here."""
    readers: defaultdict[int, list[int]] = defaultdict(list)
    for index, op in enumerate(g.ops):
        for t in op.inputs:
            readers[t].append(index)
    found: dict[int, LinearBias] = {}
    claimed = set(taken)
    for index, op in enumerate(g.ops):
        if op.kind is not OpKind.MATMUL:
            continue
        y = op.outputs[0]
        out = g.tensors[y]
        if prod(out.shape[:-2]) != 1 or len(readers[y]) != 1 or readers[y][0] in claimed:
            continue  # a batch of products, the product read elsewhere (or a graph output), or taken
        add = g.ops[readers[y][0]]
        others = [t for t in add.inputs if t != y]
        if add.kind is not OpKind.ADD or len(add.inputs) != 2 or len(others) != 1:  # y + y is no bias
            continue
        v = g.tensors[others[0]]
        vector = v.shape[-1:] == out.shape[-1:] and all(s == 1 for s in v.shape[:-1])  # operands share a rank
        if not vector or v.dtype is not out.dtype or g.tensors[add.outputs[0]].shape != out.shape:
            continue
        claimed.add(readers[y][0])
        found[index] = LinearBias(index, readers[y][0], (*op.inputs, others[0], add.outputs[0]))
    return found
