"""Errors of the run store, each a one-line message for a person (the CLI prints it and exits 2)."""

from __future__ import annotations

from pathlib import Path

from mugraph.ir.errors import MugraphError

__all__ = ["RECOVERY_HINT", "StoreBusy", "StoreDamaged", "StoreError", "StoreMismatch", "damaged"]

RECOVERY_HINT = "start over with --fresh (fresh=True from Python) or choose another --store (store=)"


class StoreError(MugraphError):
    """A run store cannot be used as asked (missing, not a run store, read-only, closed)."""


class StoreMismatch(StoreError):
    """The store was made for another program, config, budget or schema version."""


class StoreDamaged(StoreError):
    """A file of the store is unreadable or corrupt; raised instead of ever returning wrong data."""


class StoreBusy(StoreError):
    """Another live process holds the store's lock."""


def damaged(file: Path, problem: object, hint: str = RECOVERY_HINT) -> StoreDamaged:
    """A StoreDamaged naming `file`, with the first line of `problem` and the recovery hint."""
    text = str(problem).strip().splitlines()
    detail = text[0] if text else type(problem).__name__
    if isinstance(problem, BaseException) and not isinstance(problem, StoreError):
        detail = f"{type(problem).__name__}: {detail}"
    return StoreDamaged(f"run store damaged: {file}: {detail}; {hint}")
