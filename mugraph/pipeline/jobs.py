"""What the driver remembers of each Dask future it watches: which task it is and what its result
belongs to, by name rather than by position in a tuple."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

__all__ = ["ConfirmJob", "Job", "LayoutJob", "Placement", "SearchJob"]


@dataclass(frozen=True, slots=True)
class SearchJob:
    """A bundle of search tasks of one fragment (one Dask task): the task-table rows of its paths,
    in the order its results come back."""

    rows: tuple[int, ...]
    fragment: int


@dataclass(frozen=True, slots=True)
class ConfirmJob:
    """The confirmation of one found μGraph."""

    fragment: int
    digest: str


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
