"""The typed records a run store takes and gives back about tasks and found μGraphs: the rows of the
task table, a finished task as the driver hands it in, a found μGraph and the task counts.

Plain dataclasses and TypedDicts, free of Zarr and numpy, so that the protocol every run-store
backend follows (`mugraph.storage.run.protocol`) and the backends themselves share them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

__all__ = [
    "FoundRecord",
    "FragmentTasks",
    "TaskCompletion",
    "TaskRecord",
    "TaskSummary",
    "check_find_time",
    "check_ranks",
    "first_found",
]

MAX_RANK = 2**62  # a rank sums child places along a path (at most 64 steps of int32 places)


@dataclass(frozen=True)
class FoundRecord:
    """A μGraph found by a search task; `graph` is its JSON text, `task` the row that found it.

    `seconds` and `states` say when the run first found it: its run seconds (across invocations)
    and the states it had explored when the driver committed the find; None in stores written
    before find times were kept. They are a record of the run, not of the μGraph, so two finds of
    one μGraph at one path compare equal whatever their times."""

    fragment: int
    digest: str
    path: tuple[int, ...]
    graph: str
    task: int
    seconds: float | None = field(default=None, compare=False)
    states: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TaskRecord:
    """One row of the task table. `counters` is empty and `worker` "" while the task is pending.
    `rank` is the driver's order for the row (`stages.search.task_paths`: lower runs first), kept so
    a resumed run submits its pending rows in the order the killed one would have; None where it was
    not given (a root task, a store written before ranks were kept)."""

    row: int
    fragment: int
    path: tuple[int, ...]
    parent: int
    done: bool
    counters: dict[str, float]
    worker: str
    rank: int | None = None


@dataclass(frozen=True)
class TaskCompletion:
    """A finished search task as the store records it: its counters, the worker that ran it, the
    μGraphs it found and its frontier (the children to add as pending rows), with each child's rank
    where the driver knows it (`TaskRecord.rank`; None: not known). Not `done`: a search cut at the
    run's time limit, whose finds are stored while the task stays pending (no children, its
    counters not kept)."""

    row: int
    counters: Mapping[str, float]
    worker: str
    found: Sequence[FoundRecord]
    children: Sequence[tuple[int, ...]]
    ranks: Sequence[int] | None = None
    done: bool = True

    def __post_init__(self) -> None:
        if not self.done and self.children:
            raise ValueError(f"task row {self.row}: a task left pending has no children")


class FragmentTasks(TypedDict):
    done: int
    pending: int


class TaskSummary(TypedDict):
    """Task counts, overall and per fragment index, counter sums over done tasks and done tasks per
    worker."""

    tasks: int
    done: int
    pending: int
    fragments: dict[int, FragmentTasks]
    counters: dict[str, float]
    workers: dict[str, int]


def check_find_time(seconds: Any, states: Any, what: str) -> None:
    """ValueError naming `what` unless `seconds` is a finite float ≥ 0 and `states` an int ≥ 0, or
    both are None (a store written before find times were kept)."""
    if seconds is None and states is None:
        return
    ok_seconds = isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds < math.inf
    ok_states = isinstance(states, int) and not isinstance(states, bool) and states >= 0
    if not (ok_seconds and ok_states):
        raise ValueError(f"{what}: find time ({seconds!r}, {states!r}) is not (seconds ≥ 0, states ≥ 0)")


def check_ranks(ranks: Sequence[int] | None, children: int, what: str) -> list[int] | None:
    """`ranks` as a list of ints in [0, MAX_RANK), one per child; None stays None; ValueError naming
    `what` otherwise."""
    if ranks is None:
        return None
    out = list(ranks)
    if len(out) != children:
        raise ValueError(f"{what}: {len(out)} ranks for {children} children")
    if any(not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < MAX_RANK for r in out):
        raise ValueError(f"{what}: ranks {out[:8]} must be ints in [0, {MAX_RANK})")
    return out


def first_found(new: FoundRecord, kept: FoundRecord) -> FoundRecord:
    """`new` (a find at a smaller path replacing `kept`) with the find time of `kept`, the earlier
    find, where `kept` has one: the path says how the μGraph is best reached, the time when the run
    first had it."""
    if kept.seconds is None:
        return new
    return replace(new, seconds=kept.seconds, states=kept.states)
