"""Verification: Z_pq fingerprints and the float64 interpreter of the IR, output matching."""

from mugraph.stages.verify.check import (
    DEFAULT_SEEDS,
    CheckResult,
    ReferenceFingerprints,
    check_equivalence,
    match_outputs,
)
from mugraph.stages.verify.field import FieldSpec

__all__ = [
    "DEFAULT_SEEDS",
    "CheckResult",
    "FieldSpec",
    "ReferenceFingerprints",
    "check_equivalence",
    "match_outputs",
]
