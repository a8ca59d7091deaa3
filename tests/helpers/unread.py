"""Block inputs that no block op reads, counted in a μGraph (what the search must never record
outside Mirage's block-input rule)."""

from __future__ import annotations

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind


def unread_block_inputs(graph: KernelGraph) -> int:
    """How many block input ops, over all graph-defined ops, make a tensor no block op reads."""
    n = 0
    for op in graph.ops:
        if op.block is None:
            continue
        read = {i for b in op.block.ops if b.kind is not OpKind.INPUT for i in b.inputs}
        n += sum(1 for b in op.block.ops if b.kind is OpKind.INPUT and b.outputs[0] not in read)
    return n
