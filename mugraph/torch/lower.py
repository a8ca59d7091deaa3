"""Lowering an exported ATen graph to one mugraph program, and what PyTorch runs around it.

Every op the IR has (below), in the program's dtype (that of most of the model's floating inputs and
parameters: fp16, bf16 or fp32), is lowered; every other op is *glue*, run by PyTorch as the exported
graph says. A normalisation (`norms`: RMSNorm and LayerNorm, as torch's ops or written out, with the
casts that set their precision) is found first and lowered as one op. A value torch computes (a user
input, a parameter, a glue op's result) enters the program as an input named after its node; a
lowered value that glue or the model's outputs read leaves it as an output named after its node.
Inputs that depend only on the model's inputs and parameters come first; an input computed by glue
from lowered values is placed just before its first reader, which the fragment split reads as
"arrives later" (no fragment spans it), so fragments and glue run in an order where every value
exists when it is read.

Semantics are PyTorch's, decomposed into the IR's ops where exact: `rms_norm(x, w, eps)` is the IR's
rms_norm(x, eps) · w, layer_norm(x, w, b, eps) its layer_norm(x, eps) · w + b, `gelu` is the erf form
unless `approximate="tanh"`, division by a scalar is a scale by its reciprocal, and a scalar added to
a tensor is a constant input filled with it. Softmax stays glue: the IR has no max, and exp(x) without
torch's max shift overflows fp16 at x > 11.1. A value whose size depends on the data (`nonzero`, a
boolean mask's indexing, tokens routed to an expert) stays glue, and so does every op reading it: a
program is made for fixed shapes, and torch runs the rest at each call's sizes.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.live import live_ops
from mugraph.ir.serialize import SCHEMA, JSONDict, from_json, to_json
from mugraph.ir.types import OpKind
from mugraph.stages.fragments import split_program
from mugraph.torch.activations import find_activations
from mugraph.torch.composite import Composite
from mugraph.torch.errors import CaptureError, NothingLowered
from mugraph.torch.flatten import held_flat, split_linear
from mugraph.torch.lower_operands import InputSource, Skip, Value, data_dependent, source_line
from mugraph.torch.lower_ops import OpLowering
from mugraph.torch.norms import find_norms
from mugraph.torch.patterns import ASSERTS

__all__ = ["InputSource", "Lowering", "lower", "source_line"]


@dataclass(frozen=True)
class Lowering:
    """A captured graph as a mugraph program plus what torch runs around it."""

    graph: KernelGraph
    inputs: dict[str, InputSource]  # program input name -> how torch computes it
    outputs: dict[str, str]  # fx node name -> program output name (lowered values torch reads)
    lowered: tuple[str, ...]  # fx nodes computed by the program, in graph order
    glue: tuple[str, ...]  # fx nodes PyTorch runs, in graph order
    split: tuple[str, ...] = ()  # linear layers never run whole: their split pieces are lowered

    def describe(self) -> list[str]:
        """One line per kind of node, for the run's note."""
        return [
            f"lowered ({len(self.lowered)}): {', '.join(self.lowered) or '-'}",
            f"glue run by PyTorch ({len(self.glue)}): {', '.join(self.glue) or '-'}",
            *(
                [f"split linear layers, lowered as their pieces ({len(self.split)}): {', '.join(self.split)}"]
                if self.split
                else []
            ),
        ]


def _empty(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.numel() == 0


def _op_name(node: fx.Node) -> str:
    """An op as a reader knows it: `embedding`, not `aten.embedding.default`."""
    name = str(getattr(node.target, "__name__", node.target))
    return name.removeprefix("aten.").split(".")[0]


class _Lowerer(OpLowering):
    # -- the walk ---------------------------------------------------------------------------------
    def run(self) -> Lowering:
        lowered: list[str] = []
        norms = find_norms(self.nodes)
        norms |= find_activations(self.nodes, {name for n in norms.values() for name in n.nodes})
        self.flat_ok = held_flat(self.nodes, norms, set(self.handlers))
        part_of = {name: root for root, n in norms.items() for name in n.nodes if name != root}
        waiting: dict[str, list[fx.Node]] = {root: [] for root in norms}
        for node in self.nodes:
            if node.name in part_of:  # a piece of a norm: lowered with it, at its root
                waiting[part_of[node.name]].append(node)
                continue
            norm = norms.get(node.name)
            if norm is not None:
                if self._visit(node, lowered, norm):
                    lowered[-1:-1] = [n.name for n in waiting[node.name]]  # the pieces, then the root
                    continue
                for piece in waiting[node.name]:  # not lowered whole: its pieces one by one, then the root
                    self._visit(piece, lowered)
            self._visit(node, lowered)
        outputs: dict[str, str] = {}
        for node in self.nodes:
            readers = [u for u in node.users if u.op == "output" or (u.name in self.glue and u.target not in ASSERTS)]
            if node.name in self.values and readers:
                t = self.materialize(self.values[node.name])
                self.g.mark_output(t, node.name)
                outputs[node.name] = node.name
        if not outputs:
            raise NothingLowered(
                "no op of the model can be lowered to mugraph's IR (fp16, bf16 or fp32 matmul, linear, "
                "element-wise ops, sum, mean, rms_norm, layer_norm, concat): nothing to optimise" + self._why_none()
            )
        graph, used = _compact(self.g, self.early_inputs)
        inputs = {n: s for n, s in self.inputs.items() if n in used}
        live = set(_live_lowered(self.nodes, self.values, outputs, waiting))
        live |= {name for name, root in part_of.items() if root in live and root in self.values}
        needed = _needed_glue(self.nodes, self.glue, inputs)
        pieces = [split_linear(n.args[0]) for n in self.nodes if n.name in live and n.target is operator.getitem]
        split = tuple(dict.fromkeys(lin.name for lin in pieces if lin is not None and lin.name not in needed))
        return Lowering(graph, inputs, outputs, tuple(n for n in lowered if n in live), tuple(needed), split)

    def unfused_splits(self, graph: KernelGraph, inputs: dict[str, InputSource]) -> frozenset[str]:
        """The split linear layers (by name) lowered piece by piece that the search cannot fuse: a piece
        whose value no op an output needs reads (only returned or read by glue; a scale folded into its
        weight counts as the product that took it), or pieces that `graph`'s fragment split puts in
        different fragments (each then a matmul call of its own, where the model makes one)."""
        kept, _ = live_ops(self.g)
        read = {t for pos in kept for t in self.g.ops[pos].inputs}  # tensors a live compute op reads
        unfused: set[str] = set()
        for node in self.nodes:
            lin = split_linear(node.args[0]) if node.target is operator.getitem and node.args else None
            name = node.name
            while name in self.folded:
                name = self.folded[name]
            value = self.values.get(name)
            if lin is not None and isinstance(value, Tensor) and value.index not in read:
                unfused.add(lin.name)
        parts = {i: f.name for f in split_program(graph).fragments for i in f.op_indices}
        by_input = {op.outputs[0]: str(op.attr("name")) for op in graph.ops_of(OpKind.INPUT)}
        for linear, weight in self.piece_weights.items():
            rows_of = {t for t, n in by_input.items() if inputs[n].node == weight and inputs[n].rows is not None}
            pieces = {
                parts.get(i)
                for i, op in enumerate(graph.ops)
                if op.kind is OpKind.MATMUL and rows_of.intersection(op.inputs)
            }
            if len(pieces) > 1 or None in pieces:
                unfused.add(linear)
        return frozenset(unfused)

    def _why_none(self) -> str:
        """Where no op was lowered, a cause the model's tensors show: their rank or their dtype."""
        vals = [n.meta.get("val") for n in self.nodes if n.op in ("placeholder", "call_function")]
        tensors = [v for v in vals if isinstance(v, torch.Tensor)]
        high = sorted({v.dim() for v in tensors if v.dim() > 4})
        if high:
            return f"; its values have {'/'.join(map(str, high))} dims, and mugraph lowers tensors of 1 to 4 dims"
        if tensors and not any(v.dtype in (torch.float16, torch.bfloat16, torch.float32) for v in tensors):
            return f"; its tensors are {', '.join(sorted({str(v.dtype) for v in tensors}))}, not fp16, bf16 or fp32"
        empty = [n for n in self.nodes if n.op == "placeholder" and _empty(n.meta.get("val"))]
        if empty:
            shown = ", ".join(f"{n.name} {list(n.meta['val'].shape)}" for n in empty[:3])
            return f"; an input has a dimension of size 0 ({shown}): there is nothing to compute"
        ops = sorted({_op_name(n) for n in self.nodes if n.op == "call_function"})
        if ops:
            return f"; its ops ({', '.join(ops[:8])}{', ...' if len(ops) > 8 else ''}) are none of those"
        return "; it computes nothing (its outputs are its inputs or constants)"

    def _visit(self, node: fx.Node, lowered: list[str], norm: Composite | None = None) -> bool:
        """Lower `node` (as `norm` where given) or leave it to torch as glue; True where lowered. A norm
        that cannot be lowered whole is left to the caller, which visits its pieces."""
        if node.op in ("placeholder", "output") or (
            node.op == "get_attr" and all(isinstance(u.target, torch._ops.HigherOrderOperator) for u in node.users)
        ):
            return False  # a control-flow op's branch: refused with the op below
        if node.op != "call_function" or isinstance(node.target, torch._ops.HigherOrderOperator):
            where = source_line(node)
            raise CaptureError(
                f"{getattr(node.target, '__name__', node.target)} ({node.name}"
                f"{', at ' + where if where else ''}) can be neither lowered to mugraph's IR nor "
                "run by PyTorch as glue between fragments (control flow and other higher-order "
                "ops are not captured)"
            )
        if node.target in ASSERTS:
            return False  # export's check of a value's dtype: no value, nothing for the module to run
        handler = self.handlers.get(node.target)
        value: Value | None = None
        try:
            if any(data_dependent(n.meta.get("val")) for n in (node, *node.all_input_nodes)):
                raise Skip  # a size read from the data: no program has it, torch runs it
            if norm is not None:
                value = self.composite(norm)
            elif handler is not None:
                value = handler(node)
        except Skip:
            value = None
        except MugraphError:  # shapes the IR refuses (say, over its device-memory limit): glue
            value = None
        if value is not None:
            self.values[node.name] = value
            lowered.append(node.name)
            return True
        if norm is not None:
            return False  # ops it made before the refusal reach no output: `_compact` drops them
        self.glue.append(node.name)
        if any(isinstance(a, fx.Node) and (a.name in self.values or a.name in self.late) for a in node.all_input_nodes):
            self.late.add(node.name)
            self._arrives(node)
        return False


def _needed_glue(nodes: Sequence[fx.Node], glue: Sequence[str], inputs: dict[str, InputSource]) -> list[str]:
    """The glue nodes the module runs: those the model's outputs or the program's inputs read, directly
    or through other glue (a fused linear whose pieces were lowered one by one, and its split, are read
    by nothing and never run), in graph order."""
    read = {src.node for src in inputs.values() if src.node is not None}
    is_glue, needed = set(glue), set()
    for node in reversed(nodes):
        readers = node.users
        if node.name in is_glue and (node.name in read or any(u.op == "output" or u.name in needed for u in readers)):
            needed.add(node.name)
    return [n for n in glue if n in needed]


def _live_lowered(
    nodes: Sequence[fx.Node], values: dict[str, Value], outputs: dict[str, str], pieces: dict[str, list[fx.Node]]
) -> list[str]:
    """Lowered nodes some program output depends on, in graph order (a composite's root reads what its
    pieces read)."""
    live: set[str] = set(outputs)
    for node in reversed(nodes):
        if node.name in live:
            for n in (node, *pieces.get(node.name, ())):
                live.update(a.name for a in n.all_input_nodes if a.name in values)
    return [n.name for n in nodes if n.name in live]


def _compact(g: KernelGraph, early: set[str]) -> tuple[KernelGraph, set[str]]:
    """`g` without the ops no output needs, its early inputs first: rebuilt from its JSON (checked again).
    Returns the graph and the names of the inputs it kept."""
    ops = to_json(g)["ops"]
    live: set[int] = set()
    keep: list[int] = []
    for pos in reversed(range(len(g.ops))):
        op = g.ops[pos]
        if op.kind is OpKind.OUTPUT or live.intersection(op.outputs):
            keep.append(pos)
            live.update(op.inputs)
    keep.reverse()
    first = [p for p in keep if g.ops[p].kind is OpKind.INPUT and str(g.ops[p].attr("name")) in early]
    order = first + [p for p in keep if p not in set(first)]
    index: dict[int, int] = {}
    out: list[JSONDict] = []  # the kept ops' JSON records, operands renumbered
    for p in order:
        op = g.ops[p]
        out.append({**ops[p], "inputs": [index[t] for t in op.inputs]} if "inputs" in ops[p] else ops[p])
        for t in op.outputs:
            index[t] = len(index)
    used = {str(g.ops[p].attr("name")) for p in order if g.ops[p].kind is OpKind.INPUT}
    return from_json({"schema": SCHEMA, "ops": out}, g.limits, "captured program"), used


def lower(ep: torch.export.ExportedProgram) -> Lowering:
    """The mugraph program of an exported graph, and the glue around it. A split linear layer is lowered
    piece by piece only where the search can fuse its pieces: every piece read by an op of the
    program, all of them in one fragment (`_Lowerer.unfused_splits`); any other is lowered again
    whole, since its pieces would be more matmul calls than the model makes."""
    whole: frozenset[str] = frozenset()
    while True:  # each pass keeps more linears whole (at most one pass per split linear)
        lowerer = _Lowerer(ep)
        lowerer.whole = whole
        lowering = lowerer.run()
        more = lowerer.unfused_splits(lowering.graph, lowering.inputs) - whole
        if not more:
            return lowering
        whole |= more
