"""The confirm stage: a μGraph the search matched on its one inline seed is tested again on k fresh
random seeds and in float64 before anything downstream trusts it.

The fresh seeds are derived from the μGraph's digest, so they differ from the search's seeds and from
one μGraph to the next (a μGraph that slipped through one random point is unlikely to pass others),
yet a rerun confirms with the same seeds and reaches the same verdict.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np

from mugraph.cuda.backend import ArrayModule, backend_name
from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.check import check_equivalence

CONFIRM_TESTS = 3


def confirm_seeds(digest: str, k: int = CONFIRM_TESTS) -> tuple[int, ...]:
    """k seeds from the digest, each at least 2**20 (the search's seeds are small integers)."""
    return tuple(
        (1 << 20) + int.from_bytes(hashlib.sha256(f"confirm|{digest}|{i}".encode()).digest()[:4], "big")
        for i in range(k)
    )


def confirm(
    reference: KernelGraph, candidate: KernelGraph, digest: str, k: int = CONFIRM_TESTS, xp: ArrayModule = np
) -> dict[str, Any]:
    """The verdict as a JSON-able dict: equivalent, seeds, float64 error, reason, seconds, backend."""
    t0 = time.perf_counter()
    result = check_equivalence(reference, candidate, confirm_seeds(digest, k), xp=xp)
    return {
        "equivalent": result.equivalent,
        "seeds": list(result.seeds),
        "float_max_rel_err": result.float_max_rel_err,
        "reason": result.reason,
        "seconds": round(time.perf_counter() - t0, 6),
        "backend": backend_name(xp),
    }
