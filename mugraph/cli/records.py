"""What `mugraph check`, `prune`, `search` and `emit` print with `--json`: one record type per
command's result, so a script reading the output finds every field named here.

TypedDicts, not dataclasses: each is printed as one JSON object. No `from __future__ import
annotations` here, as in the run store's records.
"""

import json
import math
from typing import Any, NotRequired, TypedDict

from mugraph.codegen.timing import TimingRecord


class ExpertCheck(TypedDict):
    """One expert μGraph of `check`: its fingerprint verdict and float64 error against the reference."""

    expert: str
    digest: str
    equivalent: bool
    undecided: bool  # fingerprints differ, float64 agrees (an identity through exp or sqrt, maybe)
    float_max_rel_err: float | None  # None where the names do not line up
    fingerprint_seconds: float
    float_seconds: float
    reason: str


class ExpertReach(TypedDict):
    """One expert of `prune`: its intermediate tensors, those the oracle prunes, and so whether the
    search can reach it."""

    expert: str
    tensors: int
    pruned: list[str]
    reachable: bool


class ExpertOutcome(TypedDict):
    """One expert in `search`'s result: found by the search, or why not."""

    found: bool
    reason: str | None


class SearchSummary(TypedDict):
    """`search`'s result: what the serial search found, whether the expert is among it, and what it took."""

    program: str
    preset: str
    config_digest: str
    states: int
    mugraphs: int
    digests: list[str]
    expert_found: bool | None  # the program's first expert; None for a program with no experts
    expert_reason: str | None  # why the first expert is not found, where it is not
    experts: dict[str, ExpertOutcome]  # every expert by its label, the first included
    solver_calls: int
    seconds: float
    complete: bool
    frontier: int
    tasks: int
    memo: str
    counters: dict[str, float]
    memo_counters: dict[str, int | float]
    paths: dict[str, list[int]]


class EmitResult(TypedDict):
    """`emit`'s result: the module written and, with --check or --time, how it ran against the float64
    reference (`ok`, `max_rel_err` and `interpreted` stay None without either)."""

    program: str
    digest: str
    out: str | None  # the file written; None when the module went to stdout
    ok: bool | None
    max_rel_err: float | None
    interpreted: bool | None  # run in Triton's interpreter rather than compiled for a GPU
    tolerance: float
    note: NotRequired[str]  # the module takes other strides than the run's ranking assumed (--layout)
    per_output: NotRequired[dict[str, float]]  # --check
    run_seconds: NotRequired[float]
    timing: NotRequired[TimingRecord]  # --time
    median_seconds: NotRequired[float]
    device: NotRequired[str]
    seconds: NotRequired[float]  # the whole command; set last


def json_line(record: Any) -> str:
    """`record` as one line of strict JSON: a NaN or infinite error (a candidate off by an overflow)
    is written null, where Python's `json` would write `NaN` or `Infinity`, which JSON does not have."""
    return json.dumps(_finite(record), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
