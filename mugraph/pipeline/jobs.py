"""What the driver remembers of each Dask future it watches (which task it is and what its result
belongs to) and of each search result it holds until the next commit, by name rather than by
position in a tuple."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from mugraph.pipeline.records import SearchTaskResult

__all__ = ["ConfirmJob", "Job", "LayoutJob", "Placement", "SearchJob", "StagedResult"]


@dataclass(frozen=True, slots=True)
class SearchJob:
    """A bundle of search tasks of one fragment (one Dask task): the task-table rows of its paths and
    the paths, in the order its results come back (a bundle that stops early returns a prefix, and
    the driver submits the rest again)."""

    rows: tuple[int, ...]
    fragment: int
    paths: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class ConfirmJob:
    """The confirmation of one found μGraph, at its Dask priority (`dispatch.confirm_priority`)."""

    fragment: int
    digest: str
    priority: int


@dataclass(frozen=True, slots=True)
class LayoutJob:
    """The layout choice of one confirmed μGraph."""

    fragment: int
    digest: str


Job = SearchJob | ConfirmJob | LayoutJob


class Placement(TypedDict, total=False):
    """Where a task may run (`Client.submit`'s keywords): a GPU worker, or one pinned worker."""

    resources: dict[str, int]
    workers: list[str]
    allow_other_workers: bool


@dataclass(frozen=True, slots=True)
class StagedResult:
    """One explored path's result, handled and waiting for the next batch commit: its task-table row
    and fragment."""

    row: int
    fragment: int
    result: SearchTaskResult
