"""The program a run store was made for, had again to check the store's μGraphs against it, without
running code the user did not name.

A store is data that may come from someone else, and the program path its meta records (the
`optimize PROGRAM` it was made with) could name any Python file; a checksum does not help, since
whoever edits a store can recompute it. So a program is taken from the store only where that runs
no code (a built-in name, a JSON file: `programs.resolve_recorded_program`); a `.py` program is run
only where the user names it (`--program FILE`, or the program `optimize` itself was given), and a
command that needs it and was not given it says which option to pass."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.names import printable
from mugraph.ir.serialize import digest as json_digest
from mugraph.programs import Program, resolve_program, resolve_recorded_program
from mugraph.storage.run.protocol import RunStoreReader
from mugraph.storage.run.recorded_command import TORCH_MODEL_ARG, program_argument

__all__ = ["PROGRAM_OPTION", "StoreProgram", "program_of", "recorded_program", "store_program"]

PROGRAM_OPTION = "--program"  # how a command that reads a store is told the program file to run


@dataclass(frozen=True)
class StoreProgram:
    """The store's program as had again (`reference`), or None and why not (`why`); `needs_file` is the
    program file the store names and that only the user may ask to run (None where that is not why)."""

    reference: KernelGraph | None
    why: str | None = None
    needs_file: str | None = None

    def required(self, store: Path, what: str) -> KernelGraph:
        """The reference, or a one-line MugraphError saying why there is none (and, for a program file
        the store names, the option that names it): `what` says what needs it."""
        if self.reference is not None:
            return self.reference
        raise MugraphError(f"{store}: {what} needs the program this store was made for: {self.why}")


def recorded_program(meta: Mapping[str, Any]) -> str | None:
    """The PROGRAM of the command that made a store (its `meta`), as typed from here (None where none
    is recorded)."""
    command = meta.get("command")
    if isinstance(command, list) and len(command) > 1 and isinstance(command[1], str):
        return program_argument(meta, command[1])
    return None


def store_program(st: RunStoreReader, given: Program | str | None = None) -> StoreProgram:
    """The program `st` was made for (see `program_of`)."""
    return program_of(st.identity, st.meta, given)


def program_of(
    identity: Mapping[str, str], meta: Mapping[str, Any], given: Program | str | None = None
) -> StoreProgram:
    """The program of the store with this identity and meta: `given` (a program the user named: a
    Program, or a built-in name or file as the command line takes it) where it has the store's program
    digest, else the built-in or JSON program the store names. A program file (.py) the store names is
    never run here."""
    want = identity.get("program_digest")
    if given is not None:
        prog = given if isinstance(given, Program) else resolve_program(given)
        graph = prog.reference()
        if json_digest(graph) == want:
            return StoreProgram(graph)
        named = printable(given if isinstance(given, str) else prog.name)
        return StoreProgram(
            None,
            f"{named} is not the program of this run, or has changed since it (its program digest differs "
            "from the store's program_digest); restore the file as it was, or use a store made for it as it is now",
        )
    recorded = recorded_program(meta)
    changed: list[str] = []
    for spec in dict.fromkeys(s for s in (str(identity.get("program", "")), recorded) if s):
        try:
            recorded_prog = resolve_recorded_program(spec)
        except MugraphError:
            continue
        if recorded_prog is not None:
            graph = recorded_prog.reference()
            if json_digest(graph) == want:
                return StoreProgram(graph)
            changed.append(spec)
    spec = recorded or str(identity.get("program", ""))
    shown = printable(spec)
    if Path(spec).suffix == ".py":
        return StoreProgram(
            None,
            f"it was made from the program file {shown}, which is code and is run only when you name it: "
            f"pass {PROGRAM_OPTION} {shlex.quote(shown)}",
            spec,
        )
    if changed:
        return StoreProgram(
            None,
            f"{printable(changed[-1])} has changed since this run (its program digest differs from the store's "
            "program_digest); restore the file as it was, or use a store made for the file as it is now",
        )
    if spec.startswith(TORCH_MODEL_ARG):
        return StoreProgram(
            None,
            f"it was made by mugraph.optimize from the PyTorch model {shown[len(TORCH_MODEL_ARG) :].strip(' >')} "
            "in Python, which no command can have again; mugraph.load(STORE) in Python checks the store's "
            "kernels against the model's exported program",
        )
    if Path(spec).suffix == ".json":
        return StoreProgram(
            None, f"cannot find {shown}, the program file this store was made for; run it where that file is"
        )
    return StoreProgram(None, f"cannot find the program {shown!r} this store was made for")
