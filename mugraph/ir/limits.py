"""Hardware limits that decide whether a graph is valid (Mirage's defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """Validity limits checked as ops are added.

    Defaults follow Mirage: 96 KiB of shared memory per block graph, 2 GiB of device memory for
    the data of a kernel graph, at most 2 block outputs and 1024 thread blocks per graph-defined op.
    """

    smem_bytes: int = 96 * 1024
    dmem_bytes: int = 2 * 1024**3
    max_block_outputs: int = 2
    max_blocks: int = 1024


DEFAULT_LIMITS = Limits()
