"""Inputs and outputs by name: how a named candidate (an expert, a μGraph the search recorded, a
stitched program) lines up with its reference. The emitted module takes its inputs and returns its
outputs by name, so that is how a candidate is compared; a permutation that happens to fit is for
the search's candidates alone, whose outputs have no names yet."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mugraph.ir.graph import KernelGraph
from mugraph.ir.live import live_ops
from mugraph.ir.serialize import from_json, to_json
from mugraph.ir.types import OpKind


def names_of(graph: KernelGraph, kind: OpKind) -> list[str]:
    """The names of a graph's inputs or outputs, in the order they were made or marked."""
    return [str(op.attr("name")) for op in graph.ops_of(kind)]


def _listed(names: Sequence[str]) -> str:
    return ", ".join(map(repr, names)) or "none"


@dataclass(frozen=True, slots=True)
class NameOrder:
    """How a candidate lines up with its reference by name: `inputs[j]` is the reference's index
    of the candidate's input j, `outputs[i]` the candidate's index of the reference's output i."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def inputs_in_order(self) -> bool:
        return self.inputs == tuple(range(len(self.inputs)))


def name_order(reference: KernelGraph, candidate: KernelGraph) -> NameOrder | str:
    """The candidate's inputs and outputs matched to the reference's by name, or why they cannot be:
    names missing or extra, or a shape or dtype that differs under one name."""
    lines = []
    for kind, what in ((OpKind.INPUT, "input"), (OpKind.OUTPUT, "output")):
        ref, cand = names_of(reference, kind), names_of(candidate, kind)
        if sorted(ref) != sorted(cand):
            return f"{what} names differ: the reference's are {_listed(ref)}, the candidate's {_listed(cand)}"
        lines.append((ref, cand))
    (ref_in, cand_in), (ref_out, cand_out) = lines
    order = NameOrder(tuple(ref_in.index(n) for n in cand_in), tuple(cand_out.index(n) for n in ref_out))
    ref_sig, cand_sig = reference.input_signature(), candidate.input_signature()
    for j, i in enumerate(order.inputs):
        (name, shape, dtype), (_, c_shape, c_dtype) = ref_sig[i], cand_sig[j]
        if (shape, dtype) != (c_shape, c_dtype):
            return (
                f"input {name!r} is {list(c_shape)} {c_dtype} in the candidate, {list(shape)} {dtype} in the reference"
            )
    ref_ts, cand_ts = reference.output_tensors, candidate.output_tensors
    for i, j in enumerate(order.outputs):
        if ref_ts[i].shape != cand_ts[j].shape:
            return (
                f"output {ref_out[i]!r} is {list(cand_ts[j].shape)} in the candidate, "
                f"{list(ref_ts[i].shape)} in the reference"
            )
    return order


def in_reference_order(graph: KernelGraph, reference: KernelGraph) -> KernelGraph:
    """`graph`, equal to `reference` by name (`name_order`), with its inputs made first and its
    outputs marked last, both in the reference's order, and its other ops in their own order
    between, less those no output reads: the μGraph the search would record for it (the search
    makes no op it leaves unread, and the canonical digest does not see one). Kernel tensors are
    numbered again in the new order; a block graph's inputs are positions in its op's inputs, so
    they stay as they are."""
    order = name_order(reference, graph)
    if isinstance(order, str):
        raise ValueError(order)
    data = to_json(graph)
    ops: list[dict[str, Any]] = data["ops"]
    made = [op for op in ops if op["kind"] == OpKind.INPUT.value]
    marked = [op for op in ops if op["kind"] == OpKind.OUTPUT.value]
    rest, _ = live_ops(graph)
    inputs = [made[order.inputs.index(k)] for k in range(len(made))]  # the reference's input k first
    outputs = [marked[j] for j in order.outputs]
    # The graph's own tensor numbers, op by op, and the numbers they take in the new order.
    numbers: dict[int, tuple[int, ...]] = {
        id(op): graph_op.outputs for op, graph_op in zip(ops, graph.ops, strict=True)
    }
    renumber: dict[int, int] = {}
    for op in [*inputs, *(ops[i] for i in rest)]:
        for old in numbers[id(op)]:
            renumber[old] = len(renumber)
    reordered = [*inputs, *(ops[i] for i in rest), *outputs]
    for op in reordered:
        if "inputs" in op:
            op["inputs"] = [renumber[t] for t in op["inputs"]]
    data["ops"] = reordered
    return from_json(data)
