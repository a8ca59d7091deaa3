"""What a run and `mugraph explain` say of a program's expert: found, or not found and why (not
equivalent to the reference, or the first choice of the search that excludes it); and the experts
as the run's store records them, for `show` and the report."""

from __future__ import annotations

from collections.abc import Sequence

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import loads
from mugraph.programs import Program
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.explain import explain_expert
from mugraph.stages.search.explanation import Explanation
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.verify.check import ReferenceCheck
from mugraph.stages.verify.names import in_reference_order
from mugraph.storage.run.run_records import ExpertRecord


def not_equivalent(label: str, against: ReferenceCheck, expert: KernelGraph) -> Explanation | None:
    """Where the expert does not compute the reference (by name, as `check` compares): the search,
    which keeps only equivalent μGraphs, cannot find it, whatever the walk would reach. The walk
    compares canonical digests, which do not see output names, so this is asked first."""
    r = against.check(expert)
    if r.equivalent:
        return None
    if r.undecided:  # float64 agrees: no seed would tell, and the search, which fingerprints, cannot keep it
        return Explanation(label, False, "undecided by fingerprints", r.reason)
    # names that differ hold on every seed; a value that differs may be a seed's chance
    more = "" if "names differ" in r.reason else "; `mugraph check` tests it on more seeds"
    return Explanation(label, False, "not equivalent", f"{r.reason}{more}")


def as_found(reference: KernelGraph, expert: KernelGraph) -> KernelGraph:
    """The expert as the search would record it: inputs and outputs in the reference's order (an
    expert equivalent by name has the reference's names)."""
    return in_reference_order(expert, reference)


def split_note(fragments: int) -> str:
    """Why an expert of a program that splits is neither found nor explained by the search."""
    return (
        f"the program splits into {fragments} fragments, each searched alone, and an expert is the whole "
        "program (`mugraph check` checks it; `mugraph search` searches the whole program as one)"
    )


def expert_line(
    prog: Program, fragments: Sequence[tuple[str, SearchConfig]], found: set[str], *, complete: bool = True
) -> str | None:
    """What `optimize` says of each of the program's experts, a line each: found, or not found and why
    (`explain`'s one-line reason; for a search stopped at its time limit with the expert inside the
    space, that it is not found yet). Found only for a program searched as one fragment, where an
    expert and the fragment are the same program; for one that splits, that it is not looked for;
    None without an expert."""
    if not prog.experts:
        return None
    if len(fragments) != 1:
        return "\n".join(f"expert {label!r} not looked for: {split_note(len(fragments))}" for label in prog.experts)
    reference = prog.reference()  # the fragment's names its outputs o0, o1, ...: the expert uses the program's
    text, config = fragments[0]
    searcher: Searcher | None = None  # made once, for the first expert that needs explaining
    against: ReferenceCheck | None = None  # the reference's side, made once for the experts not found
    lines = []
    for label, build in prog.experts.items():
        graph = build()
        expert = _in_reference_order(reference, graph)
        # A found μGraph computes the reference's outputs in its order, so an expert in that order by
        # name that is one of them computes each under its name: no test on drawn inputs (of the
        # program's full shapes, a second of every run's end) is needed.
        if expert is not None and canonical_digest(expert) in found:
            lines.append(f"expert {label!r} found")
            continue
        if against is None:
            against = ReferenceCheck(reference, seeds=(0,))
        wrong = not_equivalent(label, against, graph)
        if wrong is not None:
            lines.append(f"expert {label!r} NOT found: {wrong.line()}")
            continue
        assert expert is not None  # equivalent by name: its names are the reference's
        if searcher is None:
            searcher = Searcher(Fragment(loads(text), config, prog.name))
        lines.append(f"expert {label!r} {explain_expert(searcher, label, expert).missed_line(complete)}")
    return "\n".join(lines)


def _in_reference_order(reference: KernelGraph, expert: KernelGraph) -> KernelGraph | None:
    """`as_found(reference, expert)`; None where the expert's names are not the reference's (`check`
    says so)."""
    try:
        return as_found(reference, expert)
    except ValueError:
        return None


def stored_experts(prog: Program, fragments: int) -> list[ExpertRecord]:
    """The program's experts as the store records them: each label with the digest its μGraph has
    where the search finds it (as `expert_line` looks it up), in the program's order; none for a
    program that splits, whose experts are not looked for. An expert whose names are not the
    reference's (not equivalent, as `optimize` says) keeps the digest of its graph as written."""
    if fragments != 1 or not prog.experts:
        return []
    reference = prog.reference()
    out: list[ExpertRecord] = []
    for label, build in prog.experts.items():
        graph = build()
        ordered = _in_reference_order(reference, graph)
        out.append({"label": label, "digest": canonical_digest(graph if ordered is None else ordered)})
    return out
