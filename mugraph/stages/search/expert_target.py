"""A μGraph as a target the search can be steered towards: every tensor named by what computes it.

A tensor's *signature* hashes how it is computed (op kind, a reduction's or concat's dim, the
signatures of its operands, sorted for commutative ops; a block input by its source, imap and
fmap; a graph-defined op's output by its whole block graph), never by its index. The same
signatures are computed for a search state, so a state is a prefix of the target exactly when
every tensor it holds is one of the target's. `explain` walks the search tree through such
states only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from mugraph.ir.graph import BlockGraph, KernelGraph, Op
from mugraph.ir.types import COMMUTATIVE_OPS, Dim3, OpKind
from mugraph.stages.search.state import BlockSpec, KernelOp, OpenBlock, OpSpec, State

Sig = str


def _h(*parts: object) -> Sig:
    return hashlib.sha256(json.dumps(parts, separators=(",", ":"), default=str).encode()).hexdigest()[:24]


def _dim(attrs: Sequence[tuple[str, object]]) -> object:
    return next((v for k, v in attrs if k == "dim"), None)


def op_sig(kind: OpKind, attrs: Sequence[tuple[str, object]], args: Sequence[Sig]) -> Sig:
    ordered = sorted(args) if kind in COMMUTATIVE_OPS else list(args)
    return _h(kind.value, _dim(attrs), ordered)


def normalise_imap(imap: Sequence[int], grid: Dim3) -> Dim3:
    """A grid axis of size 1 splits nothing: its map entry is -1 (as the search lists imaps)."""
    a, b, c = (int(m) if g > 1 else -1 for m, g in zip(imap, grid, strict=True))
    return (a, b, c)


def input_sig(source: Sig, imap: Dim3, fmap: int) -> Sig:
    return _h("in", source, list(imap), fmap)


def output_sigs(grid: Dim3, forloop: int, inputs: Sequence[Sig], outputs: Sequence[tuple[Sig, Dim3]]) -> list[Sig]:
    """The kernel tensors a block graph writes, one per output."""
    body = _h("block", list(grid), forloop, sorted(inputs), sorted((s, list(m)) for s, m in outputs))
    return [_h("out", body, s, list(m)) for s, m in outputs]


@dataclass
class BlockTarget:
    """One graph-defined op of the target."""

    grid: Dim3
    forloop: int
    inputs: list[tuple[Sig, Dim3, int]]  # (source kernel tensor, imap, fmap), in the graph's order
    ops: list[tuple[OpKind, list[Sig], Sig]]  # computed block ops: kind, operands, result
    outputs: list[tuple[Sig, Dim3]]
    sigs: set[Sig] = field(default_factory=set)  # every block tensor

    @property
    def op_count(self) -> int:
        """Ops as max_block_ops counts them: inputs and computed ops (a concat-then-matmul is one)."""
        concats = sum(k is OpKind.CONCAT for k, _, _ in self.ops)
        return len(self.inputs) + len(self.ops) - concats


@dataclass
class KernelStep:
    """One kernel op of the target: a pre-defined op (block None) or a graph-defined one."""

    kind: OpKind
    attrs: tuple[tuple[str, object], ...]
    ins: list[Sig]
    outs: list[Sig]
    block: BlockTarget | None = None


@dataclass
class Target:
    n_inputs: int
    steps: list[KernelStep]  # computed kernel ops, in the graph's order
    sigs: set[Sig]  # every kernel tensor

    @property
    def kernel_ops(self) -> int:
        """Kernel ops as max_kernel_ops counts them (inputs included)."""
        return self.n_inputs + len(self.steps)

    @property
    def block_graphs(self) -> int:
        return sum(s.block is not None for s in self.steps)


def _block_target(bg: BlockGraph, sources: Sequence[Sig]) -> BlockTarget:
    sig: dict[int, Sig] = {}
    inputs: list[tuple[Sig, Dim3, int]] = []
    ops: list[tuple[OpKind, list[Sig], Sig]] = []
    outputs: list[tuple[Sig, Dim3]] = []
    for op in bg.ops:
        match op.kind:
            case OpKind.INPUT:
                imap = normalise_imap(op.dims_attr("imap"), bg.grid)
                fmap = op.int_attr("fmap")
                src = sources[len(inputs)]
                inputs.append((src, imap, fmap))
                sig[op.outputs[0]] = input_sig(src, imap, fmap)
            case OpKind.OUTPUT:
                om = op.dims_attr("omap")
                outputs.append((sig[op.inputs[0]], (om[0], om[1], om[2])))
            case kind:
                args = [sig[i] for i in op.inputs]
                sig[op.outputs[0]] = op_sig(kind, op.attrs, args)
                ops.append((kind, args, sig[op.outputs[0]]))
    return BlockTarget(bg.grid, bg.forloop, inputs, ops, outputs, set(sig.values()))


def target_of(graph: KernelGraph) -> Target:
    """The target of an expert μGraph (its inputs in the reference's order)."""
    sig: dict[int, Sig] = {}
    steps: list[KernelStep] = []
    n_inputs = 0
    for op in graph.ops:
        match op.kind:
            case OpKind.INPUT:
                sig[op.outputs[0]] = _h("input", n_inputs)
                n_inputs += 1
            case OpKind.OUTPUT:
                pass
            case _:
                steps.append(_kernel_step(op, sig))
    return Target(n_inputs, steps, set(sig.values()))


def _kernel_step(op: Op, sig: dict[int, Sig]) -> KernelStep:
    ins = [sig[i] for i in op.inputs]
    if op.kind is OpKind.CUSTOMIZED:
        assert op.block is not None
        block = _block_target(op.block, ins)
        outs = output_sigs(block.grid, block.forloop, [input_sig(*i) for i in block.inputs], block.outputs)
        sig.update(zip(op.outputs, outs, strict=True))
        return KernelStep(op.kind, (), ins, outs, block)
    sig[op.outputs[0]] = op_sig(op.kind, op.attrs, ins)
    return KernelStep(op.kind, op.attrs, ins, [sig[op.outputs[0]]])


# -- the same signatures for a search state ---------------------------------------------------------
def _spec_block_sigs(
    inputs: Sequence[tuple[int, Dim3, int]], ops: Sequence[OpSpec], kernel: Sequence[Sig], ranks: Sequence[int]
) -> list[Sig]:
    """Block tensor signatures of a block graph being built, in the search's tensor order (a
    concat-then-matmul makes three tensors: the two concatenations and the product)."""
    out = [input_sig(kernel[src], imap, fmap) for src, imap, fmap in inputs]
    for op in ops:
        args = [out[i] for i in op.inputs]
        if op.kind is OpKind.CONCAT and len(op.inputs) == 4:
            r = ranks[op.inputs[0]]
            left = op_sig(OpKind.CONCAT, (("dim", r - 1),), args[:2])
            right = op_sig(OpKind.CONCAT, (("dim", r - 2),), args[2:])
            out += [left, right, op_sig(OpKind.MATMUL, (), [left, right])]
        else:
            out.append(op_sig(op.kind, op.attrs, args))
    return out


def _closed_sigs(spec: BlockSpec, kernel: Sequence[Sig], ranks: Sequence[int]) -> list[Sig]:
    inputs = [(i.source, normalise_imap(i.imap, spec.grid), i.fmap) for i in spec.inputs]
    block = _spec_block_sigs(inputs, spec.ops, kernel, ranks)
    ins = block[: len(inputs)]
    return output_sigs(spec.grid, spec.forloop, ins, [(block[i], spec.omap) for i in spec.outputs])


def kernel_sigs(state: State) -> list[Sig]:
    """The signature of every kernel tensor of a state, in its tensor order."""
    out: list[Sig] = []
    for op in state.ops:
        out += _kernel_op_sigs(op, out, state)
    return out


def _kernel_op_sigs(op: KernelOp, done: list[Sig], state: State) -> list[Sig]:
    if op.kind is OpKind.INPUT:
        return [_h("input", len(done))]
    if op.block is not None:
        ranks = _spec_ranks(op.block, state)
        return _closed_sigs(op.block, done, ranks)
    return [op_sig(op.kind, op.attrs, [done[i] for i in op.inputs])]


def _spec_ranks(spec: BlockSpec, state: State) -> list[int]:
    """Ranks of a closed block graph's tensors, as far as the macro needs them (inputs keep
    their source's rank; every op a matrix or more)."""
    ranks = [len(state.tensors[i.source].shape) for i in spec.inputs]
    for op in spec.ops:
        r = ranks[op.inputs[0]] if op.inputs else 2
        ranks += [r] * (3 if op.kind is OpKind.CONCAT and len(op.inputs) == 4 else 1)
    return ranks


def block_sigs(block: OpenBlock, kernel: Sequence[Sig]) -> list[Sig]:
    """The signature of every tensor of an open block graph whose inputs are chosen."""
    inputs = [(i.source, normalise_imap(i.imap, block.grid), i.fmap) for i in block.inputs]
    return _spec_block_sigs(inputs, block.ops, kernel, [len(t.shape) for t in block.tensors])
