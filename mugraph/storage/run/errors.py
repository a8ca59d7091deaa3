"""Errors of the run store, each a one-line message for a person (the CLI prints it and exits 2)."""

from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Any

from mugraph.ir.errors import MugraphError

__all__ = [
    "LOCK_NAME",
    "MISMATCH_HINT",
    "OtherProgram",
    "StoreBusy",
    "StoreDamaged",
    "StoreError",
    "StoreMismatch",
    "command_line_text",
    "damaged",
    "recovery_hint",
]

# A store made for another run holds nothing this run can use: it starts over or uses another store.
# --fresh deletes what the store holds: said, since a model changed under its name (two models both called
# `Net`) reads as a mismatch of its graph, not as another program
MISMATCH_HINT = (
    "choose another --store (store=) to keep what it holds, or start over with --fresh (fresh=True from "
    "Python), which deletes it"
)


def recovery_hint(store: Path | None = None) -> str:
    """A damaged store keeps its intact records: `mugraph repair` keeps them, and says when it cannot.
    The command names the store where it is known, quoted to be pasted as it is."""
    where = "STORE" if store is None else shlex.quote(str(store))
    return f"run `mugraph repair {where}` to keep every intact record and resume, or {MISMATCH_HINT}"


# The writer's lock file at a store's root, made with the store and never removed: it tells a store's
# root from the directories of its records (`storage.run.lock` takes it).
LOCK_NAME = "mugraph.lock"


class StoreError(MugraphError):
    """A run store cannot be used as asked (missing, not a run store, read-only, closed)."""


class StoreMismatch(StoreError):
    """The store was made for another program, config, budget or schema version."""


class OtherProgram(StoreMismatch):
    """The store holds a run of another program than the one given: neither resumed nor, with
    `--fresh`, deleted (that would lose another program's results for a mistyped program or path).
    `held` says what it holds beside the program's name ("complete, 46 μGraphs found"), where the
    caller that opened it could read that."""

    def __init__(self, path: Path, stored: str, given: str, *, fresh: bool, held: str = "") -> None:
        self.path, self.stored, self.given, self.fresh, self.held = path, stored, given, fresh, held
        what = f"a run of another program, {stored!r}" + (f" ({held})" if held else "")
        if fresh:
            start = f"refusing to delete run store {path} for --fresh (fresh=True from Python): it holds {what}"
        else:
            start = f"run store {path} holds {what}"
        super().__init__(
            f"{start}, not of {given!r}; choose another --store (store=) for {given!r}, or delete {path} "
            "yourself to use its path (--fresh replaces only a run of the same program)"
        )

    def __reduce__(self) -> tuple[Any, tuple[Path, str, str]]:
        return functools.partial(OtherProgram, fresh=self.fresh, held=self.held), (self.path, self.stored, self.given)

    def described(self, held: str) -> OtherProgram:
        """The same refusal, saying what the store holds beside its program's name."""
        return OtherProgram(self.path, self.stored, self.given, fresh=self.fresh, held=held)


class StoreDamaged(StoreError):
    """A file of the store is unreadable or corrupt; raised instead of ever returning wrong data.

    `file` and `detail` (the problem alone, without the hint) let `repair` list every damaged
    record where the readers stop at the first."""

    def __init__(self, message: str, file: Path | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.detail = detail or message


class StoreBusy(StoreError):
    """Another live run holds the store's lock (another process, or another thread of this one):
    `holder` is its pid as the lock file says it."""

    def __init__(self, message: str, holder: str = "unknown") -> None:
        super().__init__(message)
        self.holder = holder


# The library's arguments named beside the command line's options in the hints above, which a
# command line has no use for: `command_line_text` leaves them out of what the CLI prints.
PYTHON_ASIDES = (" (fresh=True from Python)", " (store=)")


def command_line_text(message: str) -> str:
    """A store error's message as the command line says it: its options only, without the Python
    arguments the library names beside them."""
    for aside in PYTHON_ASIDES:
        message = message.replace(aside, "")
    return message


def damaged(file: Path, problem: object, hint: str | None = None) -> StoreDamaged:
    """A StoreDamaged naming `file`, with the first line of `problem` and `hint`, by default the
    recovery hint for the store `file` is in (`recovery_hint`)."""
    text = str(problem).strip().splitlines()
    detail = text[0] if text else type(problem).__name__
    if isinstance(problem, BaseException) and not isinstance(problem, StoreError):
        detail = f"{type(problem).__name__}: {detail}"
    hint = recovery_hint(store_root(file)) if hint is None else hint
    return StoreDamaged(f"run store damaged: {file}: {detail}; {hint}", file, detail)


def store_root(file: Path) -> Path | None:
    """The run store `file` is in, or is: the nearest directory holding the store's lock file (None
    where none does, or the file system cannot be read)."""
    try:
        for where in (file, *file.parents):
            if (where / LOCK_NAME).is_file():
                return where
    except OSError:
        return None
    return None
