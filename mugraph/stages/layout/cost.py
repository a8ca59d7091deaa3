"""A simple, documented cost used to rank confirmed μGraphs until layout selection lands (issue 6).

Every kernel op is one GPU kernel launch that reads its inputs from and writes its outputs to device
memory (DRAM); block graphs keep their intermediates in shared memory, so fusion shows up here as
fewer launches and fewer DRAM bytes. The estimate is

    seconds = kernels * LAUNCH_SECONDS + dram_bytes / DRAM_BYTES_PER_SECOND

with the constants of a generic data-centre GPU (5 μs per launch, 2 TB/s). FLOPs are ignored: every
benchmark here is memory-bound at decoding batch sizes. Ties are broken by digest, so a ranking is
deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind

LAUNCH_SECONDS = 5e-6
DRAM_BYTES_PER_SECOND = 2.0e12
COST_MODEL = "simple-v1"


@dataclass(frozen=True, slots=True)
class SimpleCost:
    kernels: int
    dram_bytes: int
    estimated_seconds: float


def simple_cost(graph: KernelGraph) -> SimpleCost:
    kernels, traffic = 0, 0
    for op in graph.ops:
        if op.kind in (OpKind.INPUT, OpKind.OUTPUT):
            continue
        kernels += 1
        traffic += sum(graph.tensors[i].nbytes for i in (*op.inputs, *op.outputs))
    return SimpleCost(kernels, traffic, kernels * LAUNCH_SECONDS + traffic / DRAM_BYTES_PER_SECOND)


def rank(candidates: Mapping[str, KernelGraph], reference: KernelGraph) -> list[dict[str, Any]]:
    """One entry per candidate (keyed by digest), best first, with its speedup over `reference`."""
    base = simple_cost(reference).estimated_seconds
    rows = []
    for d, g in candidates.items():
        c = simple_cost(g)
        rows.append({"digest": d, **asdict(c), "speedup": base / c.estimated_seconds, "model": COST_MODEL})
    rows.sort(key=lambda r: (r["estimated_seconds"], r["digest"]))
    return rows
