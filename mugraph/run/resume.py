"""How to go on with a run that stopped before its end, in one sentence ("... to resume") that every
place saying it takes from here: the run itself (its interrupt line, its `done` event's `resume`, a
closed stdout's line, the library's note) and the commands that read its store afterwards (`status`,
`show`, `emit`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mugraph.pipeline.interrupts import resume_advice
from mugraph.storage.run.recorded_command import made_from_python, python_call, resuming_command


def how_to_resume(
    store: Path | None = None, meta: Mapping[str, Any] | None = None, *, fresh: bool = False, call: bool = False
) -> str:
    """The run itself says it of its own command (`call`: the library's call), never with the fresh
    start it began with, which would delete what it did (`fresh`); the words are `interrupts`' own, as
    the command line says them before anything else is imported. A reader of the store (`store` and its
    `meta` given) names the command that made it, at the store's path and without --fresh, or the
    `mugraph.optimize` call of a store made from Python, which no shell runs again."""
    if store is None:
        return resume_advice(fresh, call=call)
    meta = meta or {}
    recorded = resuming_command(meta, store)
    if recorded is not None:  # as a person runs it: a recorded --json would stream JSON at them
        return f"run `{recorded}` to resume"
    if made_from_python(meta):
        return f"call {python_call(store, meta)} again to resume"
    return "run the `mugraph optimize` command that made it again, without --fresh, to resume"
