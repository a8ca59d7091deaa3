"""The check that a run store's stitched program computes the program it was made for, shared by the
commands that turn it into code (`emit`) and `repair`, which must find what `emit` refuses.

Checksums guard a store against damage, not against an edit (anyone can recompute one): a final
record whose program graph was edited and resealed reads as whole. `emit` runs the stored program
beside the program in float64 and in the ring before it writes it out (`stages.verify.stored`);
`repair` runs the same check and drops such a final record, which the resumed run stitches again
from the records it rests on (those are content-addressed: a found μGraph hashes to its name)."""

from __future__ import annotations

import shlex
from pathlib import Path

from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import loads
from mugraph.programs import Program
from mugraph.run.store_program import PROGRAM_OPTION, program_of
from mugraph.stages.verify.stored import stored_program_differs
from mugraph.storage.run.errors import MISMATCH_HINT, StoreDamaged, damaged
from mugraph.storage.run.paths import EXPORTED_META_KEY
from mugraph.storage.run.records import metadata_file
from mugraph.storage.run.repair import Judgement
from mugraph.storage.run.repair_scan import Damage, Scan

__all__ = ["differs_from_program", "final_program_judge", "repair_hint"]


def repair_hint(store: Path, program: str | None) -> str:
    """What to do about a stored program that does not compute its program: `repair` (naming the
    program file where the store was made from one) drops it and the resumed run stitches it again."""
    named = f" {PROGRAM_OPTION} {shlex.quote(program)}" if program else ""
    return (
        f"run `mugraph repair {shlex.quote(str(store))}{named}` to drop it and resume the run, which stitches "
        f"the program again, or {MISMATCH_HINT}"
    )


def differs_from_program(file: Path, reference: KernelGraph, program: KernelGraph, hint: str) -> StoreDamaged | None:
    """The damage of the record `file` whose stored program does not compute `reference` (None where
    it does); `hint` says what to do."""
    why = stored_program_differs(reference, program)
    if why is None:
        return None
    return damaged(file, f"the μGraph it holds does not compute the program: {why}; it was changed after the run", hint)


def final_program_judge(given: Program | str | None) -> Judgement:
    """`repair`'s check of a scanned store's intact final record against the program (the built-in or
    JSON program the store names, or `given`, a program the user named): the final record as damage
    where its program does not compute it; a note where the program cannot be had to check it."""

    def judge(scan: Scan) -> tuple[list[Damage], list[str]]:
        final, meta = scan.final, scan.attrs["meta"]
        if final is None or "final" in scan.damaged or EXPORTED_META_KEY in meta:
            return [], []  # a PyTorch model's is checked against its exported program by `mugraph.load`
        file = metadata_file(scan.root, "final")
        had = program_of(scan.attrs["identity"], meta, given)
        if had.reference is None:
            return [], [f"note: {file} was not checked against the program it computes: {had.why}"]
        try:
            program = loads(str(final.get("program_graph")))
        except Exception as exc:  # stored data is input
            return [Damage("final", file, f"program_graph is not a kernel graph ({type(exc).__name__}: {exc})")], []
        bad = differs_from_program(file, had.reference, program, "")
        return ([Damage("final", file, bad.detail)] if bad is not None else []), []

    return judge
