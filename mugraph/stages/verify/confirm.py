"""The confirm stage: a μGraph the search matched on its one inline seed is tested again on k fresh
random seeds and in float64 before anything downstream trusts it.

The fresh seeds are derived from the fragment's digest: they differ from the search's seeds (small
integers), a rerun confirms with the same seeds and reaches the same verdict, and the reference's
fingerprints and float64 outputs are computed once per fragment and worker rather than once per
μGraph, with the values the μGraphs share reused between them. The seeds' inputs are held between
μGraphs only while they are small (`HOLD_INPUT_BYTES`); a large fragment's are drawn again for each
μGraph, one seed's alive at a time, which bounds the confirming worker's memory at one seed's inputs
rather than k + 1.
"""

from __future__ import annotations

import hashlib
import time
from typing import TypedDict

import numpy as np

from mugraph.arrays.backend import ArrayModule, backend_name
from mugraph.ir.graph import KernelGraph
from mugraph.stages.verify.check import FloatReference, ReferenceFingerprints, input_bytes
from mugraph.stages.verify.float_error import FLOAT_TOLERANCE, worst_error

CONFIRM_TESTS = 3
TOLERANCE = FLOAT_TOLERANCE
CONFIRM_CACHE_BYTES = 256 << 20  # values shared by the μGraphs of one fragment (reuse.py)
# The confirm stage's k + 1 seeds' inputs are held between μGraphs while they take at most this
# together (in a worker, all its Confirmers together: `pipeline.worker`); past it each seed's are
# drawn again for every μGraph and dropped once it has run there, one seed's alive at a time.
# rms_norm's take 0.8 GB and gated_mlp's 1.07 GB (held); a llama-7B MLP's fragments 2.9 and 1.4 GB,
# which drawn again cost about 1 s a GB per μGraph (benchmarks/bench_verify_memory.py).
HOLD_INPUT_BYTES = 1100 << 20


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


def held_bytes(reference: KernelGraph, k: int = CONFIRM_TESTS) -> int:
    """What a Confirmer's k + 1 seeds' inputs take where it holds them."""
    return (k + 1) * input_bytes(reference)


def holds_inputs(reference: KernelGraph, k: int = CONFIRM_TESTS, others: int = 0) -> bool:
    """Whether a Confirmer keeps its k + 1 seeds' inputs between μGraphs, beside `others` bytes
    other Confirmers hold (`HOLD_INPUT_BYTES`)."""
    return others + held_bytes(reference, k) <= HOLD_INPUT_BYTES


class Confirmer:
    """The reference's fingerprints on the fresh seeds, computed once, matched against many μGraphs."""

    def __init__(
        self,
        reference: KernelGraph,
        fragment_digest: str,
        k: int = CONFIRM_TESTS,
        xp: ArrayModule = np,
        *,
        hold: bool | None = None,
    ) -> None:
        """`hold`: whether to keep the seeds' inputs between μGraphs (None: `holds_inputs`)."""
        self.reference = reference
        self.xp = xp
        self.holds = holds_inputs(reference, k) if hold is None else hold
        seeds = confirm_seeds(fragment_digest, k)
        self.fingerprints = ReferenceFingerprints(
            reference, seeds, xp=xp, cache_bytes=CONFIRM_CACHE_BYTES, hold_inputs=self.holds
        )
        self.floats = FloatReference(reference, xp, cache_bytes=CONFIRM_CACHE_BYTES, hold_inputs=self.holds)

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
