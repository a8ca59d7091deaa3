"""A run store's stitched program checked against its program again, where it is read to be run or
written out as kernels.

The store's records carry checksums against damage, not against an edit: anyone can recompute a
crc32. So `emit` and `mugraph.load`, which turn the stored program into code, first run it beside the
program it claims to compute (the program as resolved again, or the exported program whose digest the
store recorded) in float64, as the run itself did when it stored the program (`pipeline.finish`),
and then in the ring: float64 alone passed a clamp whose bounds were edited past every value it drew.
"""

from __future__ import annotations

import numpy as np

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind
from mugraph.stages.verify.check import DEFAULT_SEEDS, FloatReference, ReferenceFingerprints
from mugraph.stages.verify.float_error import worst_error, worst_output
from mugraph.stages.verify.names import NameOrder, name_order, names_of

__all__ = ["STORED_TOLERANCE", "stored_program_differs"]

STORED_TOLERANCE = 1e-6  # relative, as the run's own check of the program it stores


def stored_program_differs(reference: KernelGraph, program: KernelGraph) -> str | None:
    """Why `program` does not compute `reference` (names that differ, an output off in float64, or
    fingerprints that differ), or None where it does."""
    order = name_order(reference, program)
    if not isinstance(order, NameOrder):
        return order
    errs = FloatReference(reference, np).rel_errs(program, order.outputs, order.inputs)
    if worst_error(errs) <= STORED_TOLERANCE:
        for seed in DEFAULT_SEEDS:  # one seed's inputs alive at a time: a 7B MLP's are 1 GB each
            matched, why = ReferenceFingerprints(reference, (seed,), cache_bytes=0).match_named(program)
            if matched is None:
                return why
        return None
    worst = worst_output(errs)
    name = names_of(reference, OpKind.OUTPUT)[worst]
    return f"output {name!r} differs from the program's in float64 (relative error {errs[worst]:.3g})"
