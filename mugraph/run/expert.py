"""What a run says of a program's expert at its end: found, or not found and why (the reason
`mugraph explain` gives)."""

from __future__ import annotations

from collections.abc import Sequence

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import loads
from mugraph.programs import Program
from mugraph.stages.search.config import SearchConfig
from mugraph.stages.search.explain import explain_expert
from mugraph.stages.search.explore import Fragment, Searcher


def expert_line(prog: Program, fragments: Sequence[tuple[str, SearchConfig]], found: set[str]) -> str | None:
    """What `optimize` says of the program's first expert: found, or not found and why (`explain`'s
    one-line reason). Only for a program searched as one fragment, where the expert and the
    fragment are the same program; None otherwise."""
    if not prog.experts or len(fragments) != 1:
        return None
    label, build = next(iter(prog.experts.items()))
    expert = build()
    if canonical_digest(expert) in found:
        return f"expert {label!r} found"
    reference, config = fragments[0]
    searcher = Searcher(Fragment(loads(reference), config, prog.name))
    return f"expert {label!r} NOT found: {explain_expert(searcher, label, expert).line()}"
