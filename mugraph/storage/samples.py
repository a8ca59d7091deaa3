"""The progress samples a run keeps in its store (`RunStore.put_timeline` / `timeline`): one per
progress event of the driver, less its `event` key. The report and `mugraph status` read them back.

TypedDicts rather than dataclasses: a sample is written and read as JSON, and the driver builds it
as a plain dict. No `from __future__ import annotations` here: TypedDict needs `NotRequired`
unquoted to tell required keys from optional ones at run time.
"""

from typing import NotRequired, TypedDict


class FragmentProgress(TypedDict):
    """One fragment's share of a sample."""

    states: int
    tasks_done: int
    tasks_running: int
    tasks_pending: int
    mugraphs: int
    confirmed: int


class ProgressSample(TypedDict):
    """Run-wide totals at `seconds` into an invocation (`wall`: when, seconds since the epoch)."""

    wall: float
    seconds: float
    invocation: int
    tasks_done: int
    tasks_running: int
    tasks_pending: int
    tasks_run: int
    states: int
    states_per_s: float
    mugraphs: int
    confirmed: int
    solver_calls: int
    fingerprints: int
    memo: dict[str, int]  # memo lookups by level (local hits, remote hits, misses)
    memo_local_hit_rate: float | None
    memo_remote_hit_rate: float | None
    fragments: dict[str, FragmentProgress]
    worker_busy_seconds: dict[str, float]
    # the space-size estimate (None until there is one; the fraction and ETA only with one)
    estimated_states: int | None
    estimated_fraction: NotRequired[float]
    eta_seconds: NotRequired[float | None]
