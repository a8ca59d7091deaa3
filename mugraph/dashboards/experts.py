"""Which ranked μGraphs are the run's program's experts, so `show` and the report can mark them.

The run records its program's experts in its store (each label with the digest its μGraph has in
the ranking rows), so a program file's own experts are marked under their own labels. A store made
before that record was kept is matched against the built-in programs instead: only when the run's
reference is a built-in's (same digest) and it was searched as one fragment, where an expert and a
fragment's μGraph are the same kind of graph. A program file named in a store is never run again to
find its experts: a store may come from elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import digest
from mugraph.storage.run.run_records import ExpertRecord

Labels = list[tuple[str, str]]  # (label, canonical digest) of each expert, in the program's order


def expert_labels(
    identity: Mapping[str, Any], fragments: Sequence[Any], recorded: Sequence[ExpertRecord] | None
) -> Labels:
    """The run's experts: as the store `recorded` them, or, for a store without the record, the
    built-in program's (empty where it cannot be told)."""
    if recorded is not None:
        return [(e["label"], e["digest"]) for e in recorded]
    from mugraph.programs import builtin_programs

    prog = builtin_programs().get(str(identity.get("program")))
    if prog is None or not prog.experts or len(fragments) != 1:
        return []
    if digest(prog.reference()) != identity.get("program_digest"):
        return []  # a file that shares a built-in's name
    return [(label, canonical_digest(build())) for label, build in prog.experts.items()]


def expert_marks(labels: Labels) -> dict[str, str]:
    """Canonical digest -> the label a ranking row of that μGraph is marked with (the labels of
    experts that are one μGraph, joined)."""
    marks: dict[str, list[str]] = {}
    for label, d in labels:
        marks.setdefault(d, []).append(label)
    return {d: ", ".join(names) for d, names in marks.items()}


def expert_note(labels: Labels, ranking: Sequence[Mapping[str, Any]], complete: bool = True) -> str:
    """Where each expert ranks, or that the search did not find it (`mugraph explain` says why), or
    not yet (a run still going, or stopped before its end, may still reach it)."""
    if not labels:
        return ""
    ranks = {r["digest"]: n for n, r in enumerate(ranking, 1)}
    missing = (
        "was not found (`mugraph explain` says why)"
        if complete
        else "is not found yet: the search has not reached its end (`mugraph explain` says whether it lies "
        "inside the space)"
    )
    parts = [
        f"expert {label!r} ranks {ranks[d]} of {len(ranking)}" if d in ranks else f"expert {label!r} {missing}"
        for label, d in labels
    ]
    return "; ".join(parts)
