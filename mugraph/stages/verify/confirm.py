"""The confirm stage: a μGraph the search matched on its one inline seed is tested again on k fresh
random seeds and in float64 before anything downstream trusts it.

The fresh seeds are derived from the fragment's digest: they differ from the search's seeds (small
integers), a rerun confirms with the same seeds and reaches the same verdict, and the reference's
fingerprints and float64 outputs are computed once per fragment and worker rather than once per
μGraph, with the values the μGraphs share reused between them.
"""

from __future__ import annotations

import hashlib
import time
from typing import TypedDict

import numpy as np

from mugraph.arrays.backend import ArrayModule, backend_name
from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.check import FLOAT_TOLERANCE, FloatReference, ReferenceFingerprints, worst_error

CONFIRM_TESTS = 3
TOLERANCE = FLOAT_TOLERANCE
CONFIRM_CACHE_BYTES = 256 << 20  # values shared by the μGraphs of one fragment (reuse.py)


class Verdict(TypedDict):
    """The confirm stage's verdict on one μGraph, as JSON: whether it is equivalent, on which seeds,
    its float64 error (None where the fingerprints already differ), why not, and what it took."""

    equivalent: bool
    seeds: list[int]
    float_max_rel_err: float | None
    reason: str
    seconds: float
    backend: str


def confirm_seeds(fragment_digest: str, k: int = CONFIRM_TESTS) -> tuple[int, ...]:
    """k seeds from the fragment's digest, each at least 2**20."""
    return tuple(
        (1 << 20) + int.from_bytes(hashlib.sha256(f"confirm|{fragment_digest}|{i}".encode()).digest()[:4], "big")
        for i in range(k)
    )


class Confirmer:
    """The reference's fingerprints on the fresh seeds, computed once, matched against many μGraphs."""

    def __init__(
        self, reference: KernelGraph, fragment_digest: str, k: int = CONFIRM_TESTS, xp: ArrayModule = np
    ) -> None:
        self.reference = reference
        self.xp = xp
        self.fingerprints = ReferenceFingerprints(
            reference, confirm_seeds(fragment_digest, k), xp=xp, cache_bytes=CONFIRM_CACHE_BYTES
        )
        self.floats = FloatReference(reference, xp, cache_bytes=CONFIRM_CACHE_BYTES)

    def confirm(self, candidate: KernelGraph) -> Verdict:
        """The verdict on `candidate` against the reference."""
        t0 = time.perf_counter()
        order, reason = self.fingerprints.match_named(candidate)  # the search named its outputs
        err: float | None = None
        if order is not None:
            err = worst_error(self.floats.rel_errs(candidate, order.outputs, order.inputs))
            if not err <= TOLERANCE:
                reason = f"float64 relative error {err:.3g} over {TOLERANCE:g}"
        return {
            "equivalent": not reason,
            "seeds": [c.seed for c in self.fingerprints.cases],
            "float_max_rel_err": err,
            "reason": reason,
            "seconds": round(time.perf_counter() - t0, 6),
            "backend": backend_name(self.xp),
        }
