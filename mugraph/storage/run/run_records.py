"""Records the driver writes to a run store as JSON and the report, `mugraph status`/`show` and the
loaders read back: the fragments (`set_fragments` / `fragments`), each μGraph's confirmation, layout
and GPU measurement (what the worker's task returned, kept as it came), the progress samples
(`put_timeline` / `timeline`: one per progress event, less its `event` key), the final result
(`put_final` / `final`) and the program's experts (`put_experts` / `experts`).

TypedDicts rather than dataclasses: they are written and read as JSON, and the driver builds them
as plain dicts. No `from __future__ import annotations` here: TypedDict needs `NotRequired`
unquoted to tell required keys from optional ones at run time.
"""

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

JsonObject = dict[str, Any]  # a JSON object whose fields another room owns (free-form meta, a ranking row)


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
    states_per_s: float  # this invocation's average
    states_per_s_searching: NotRequired[float | None]  # since its first states: the ETA's rate
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


class ExpertRecord(TypedDict):
    """One of the run's program's experts, as `show` and the report mark it: its label and the digest
    its μGraph has in the ranking rows. The store keeps them because a program file named in a store
    is never loaded again to find them (the store may come from elsewhere)."""

    label: str
    digest: str


class FragmentRecord(TypedDict):
    """One fragment of the run as the store keeps it (written once, compared on resume)."""

    name: str
    digest: str  # of (reference, config): the search.Fragment digest
    graph: str  # the fragment's reference, ir.serialize JSON
    config: str  # its SearchConfig, JSON
    preset: str
    sources: list[str]
    outputs: list[str]


class TaskStamp(TypedDict):
    """What every worker task adds to its result: the μGraph, the worker, the task's wall time."""

    digest: str
    worker: str
    wall_seconds: float


class ConfirmationRecord(TaskStamp):
    """A found μGraph checked against its fragment's reference: fresh fingerprint tests, then float64."""

    equivalent: bool
    seeds: list[int]
    float_max_rel_err: float | None  # None where the fingerprints already differ
    reason: str  # why not equivalent; empty when it is
    seconds: float
    backend: str  # the array backend that ran the tests
    run_seconds: NotRequired[float]  # the run's seconds when the driver stored it (stores since find times)


class LayoutRecord(TaskStamp):
    """The layouts chosen for a confirmed μGraph under the user's strides (stages.layout.choose's
    `LayoutResult.to_json`), or the `error` saying that no layout satisfies them."""

    schema: str  # costs.LAYOUT_SCHEMA
    io_layouts: dict[str, int]
    layouts: NotRequired[Mapping[str, Any]]  # costs.Layouts.to_json(), a type of the room that owns it
    terms: NotRequired[dict[str, int]]
    objective: NotRequired[int]
    solve_seconds: NotRequired[float]
    error: NotRequired[str]


class MeasurementRecord(TaskStamp):
    """A μGraph (or the reference) timed on a GPU (codegen.timing's `KernelTiming`), or the `error`
    of a module that failed to compile or run."""

    device: NotRequired[str]
    median_seconds: NotRequired[float]
    min_seconds: NotRequired[float]
    host_seconds: NotRequired[float]
    repeats: NotRequired[int]
    warmup: NotRequired[int]
    first_run_seconds: NotRequired[float]
    max_rel_err: NotRequired[float]
    ok: NotRequired[bool]
    l2_flushed: NotRequired[bool]
    error: NotRequired[str]
