"""Which ops of a kernel graph its outputs depend on: what a split keeps of a program, and what an
expert is once the ops nothing reads are left out (the search makes none)."""

from __future__ import annotations

from mugraph.ir.families import BOUNDARY
from mugraph.ir.graph import KernelGraph


def live_ops(program: KernelGraph) -> tuple[list[int], set[int]]:
    """The positions in `program.ops` of the compute ops some output depends on, in program order, and
    the tensors those outputs depend on (inputs included): the rest is what a split drops."""
    live = {t.index for t in program.output_tensors}
    kept: list[int] = []
    for pos in reversed(range(len(program.ops))):
        op = program.ops[pos]
        if op.kind not in BOUNDARY and live.intersection(op.outputs):
            kept.append(pos)
            live.update(op.inputs)
    return kept[::-1], live
