"""Records the driver writes to a run store as JSON and the report, `mugraph status`/`show` and the
loaders read back: the progress samples (`RunStore.put_timeline` / `timeline`: one per progress
event, less its `event` key) and the final result (`put_final` / `final`).

TypedDicts rather than dataclasses: they are written and read as JSON, and the driver builds them
as plain dicts. No `from __future__ import annotations` here: TypedDict needs `NotRequired`
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


class FinalRecord(TypedDict):
    """The run's result, rewritten at the end of every invocation."""

    complete: bool
    best: str  # the chosen μGraph's digest (the stitched program's, with several fragments)
    best_per_fragment: dict[str, str]
    program_graph: str  # the stitched program, ir.serialize JSON
    end_to_end_max_rel_err: float
    mugraphs: list[str]  # every confirmed μGraph's digest
    gpu_profile: str
    measured: NotRequired[dict[str, int]]  # μGraphs timed on a GPU, per fragment (stores since --measure)
