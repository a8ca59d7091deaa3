"""Which ranked μGraphs are a program's experts, so `show` and the report can mark them.

Only a built-in program is looked up, and only when the run's reference is that program's (same
digest) and it was searched as one fragment, where an expert and a fragment's μGraph are the same
kind of graph. A program file named in a store is never run again to find its experts: a store may
come from elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import digest


def expert_labels(identity: Mapping[str, Any], fragments: Sequence[Any]) -> dict[str, str]:
    """Canonical digest -> expert label for the run's program (empty where it cannot be told)."""
    from mugraph.programs import builtin_programs

    prog = builtin_programs().get(str(identity.get("program")))
    if prog is None or not prog.experts or len(fragments) != 1:
        return {}
    if digest(prog.reference()) != identity.get("program_digest"):
        return {}  # a file that shares a built-in's name
    return {canonical_digest(build()): label for label, build in prog.experts.items()}


def expert_note(labels: Mapping[str, str], ranking: Sequence[Mapping[str, Any]], complete: bool = True) -> str:
    """Where each expert ranks, or that the search did not find it (`mugraph explain` says why), or
    not yet (a run stopped before its end may still reach it)."""
    if not labels:
        return ""
    ranks = {r["digest"]: n for n, r in enumerate(ranking, 1)}
    missing = (
        "was not found (`mugraph explain` says why)"
        if complete
        else "is not found yet: the search stopped before its end (`mugraph explain` says whether it lies "
        "inside the space)"
    )
    parts = [
        f"expert {label!r} ranks {ranks[d]} of {len(ranking)}" if d in ranks else f"expert {label!r} {missing}"
        for d, label in labels.items()
    ]
    return "; ".join(parts)
