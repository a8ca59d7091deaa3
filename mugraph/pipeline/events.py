"""The events a run emits, one record type each: what the driver passes to `on_event` as the run goes
(the command line prints them as JSON lines, the live page draws them) and the `done` event that
`run()` returns.

TypedDicts rather than dataclasses: an event is JSON at every edge it reaches (`--json` output, the
live page's messages, the library's return value), and the library entry adds keys of its own
(`live_page`, `report`, ...). No `from __future__ import annotations` here: TypedDict needs
`NotRequired` unquoted to tell required keys from optional ones at run time.
"""

from collections.abc import Callable
from typing import Literal, NotRequired, TypedDict

from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.run_records import ProgressSample

__all__ = [
    "ConfirmedEvent",
    "DoneEvent",
    "ErrorEvent",
    "ErrorKind",
    "Estimates",
    "Event",
    "EventSink",
    "FoundEvent",
    "HistoryEvent",
    "LayoutEvent",
    "LimitEvent",
    "MeasuredEvent",
    "MemoLostEvent",
    "ProgressEvent",
    "StartEvent",
    "WorkersEvent",
]


class StartEvent(TypedDict):
    """The run begins (or resumes): what it runs, where, and how much is left."""

    event: Literal["start"]
    program: str
    store: str
    resumed: bool
    fragments: list[str]
    presets: dict[str, str]  # fragment → its search preset
    tasks_done: int
    tasks_pending: int
    workers: int
    gpu_workers: bool
    dashboard: str | None
    dashboard_taken: str | None  # the port asked for, held by another process (the dashboard is elsewhere)
    gpu_profile: str
    invocation: int
    live_page: NotRequired[str | None]  # added by the library entry once the live page is installed


class HistoryEvent(TypedDict):
    """A resumed run's earlier progress samples, once, after `start`."""

    event: Literal["history"]
    samples: list[ProgressSample]


class ProgressEvent(ProgressSample):
    """Run-wide totals now; kept (less `event`) as a progress sample of the timeline."""

    event: Literal["progress"]


class FoundEvent(TypedDict):
    """A μGraph found for the first time (its confirmation is submitted at once), with when: the
    run's seconds and the states it had explored, as its found record keeps them."""

    event: Literal["found"]
    fragment: str
    digest: str
    path: list[int]
    seconds: float
    states: int


class ConfirmedEvent(TypedDict):
    event: Literal["confirmed"]
    fragment: str
    digest: str
    equivalent: bool


class Estimates(TypedDict, total=False):
    """The model's time for a μGraph just laid out and for its fragment's reference (the live page's
    best-so-far curve); absent where the layout failed."""

    estimated_seconds: float
    reference_seconds: float


class LayoutEvent(Estimates):
    """A confirmed μGraph's layouts were chosen (`objective`), or none fits the strides (`error`)."""

    event: Literal["layout"]
    fragment: str
    digest: str
    objective: int | None
    solve_seconds: float | None
    error: str | None


class LimitEvent(TypedDict):
    """The time limit was reached: the search tasks are stopped, those running with what they had
    found kept (their rows stay pending in the store, for a resume), and the confirmations and
    layouts of what was found run on for up to `drain_seconds`."""

    event: Literal["limit"]
    time_limit: float
    cancelled: int  # search tasks stopped, running (their finds kept) or queued
    checks: int  # confirmations and layouts left to run
    drain_seconds: float


class WorkersEvent(TypedDict):
    """The cluster's worker count went to 0 in the middle of the run (every worker left: nothing runs
    until one joins), or back up from 0 (`workers` joined since): said once each time it changes so."""

    event: Literal["workers"]
    workers: int
    seconds: float  # into this invocation


class MemoLostEvent(TypedDict):
    """A worker's shared memo failed (the Redis server went away): it goes on with its local memo,
    slower and with the same results. Once per run, for the first worker that reports it."""

    event: Literal["memo_lost"]
    worker: str
    error: str  # what the memo client said (no password or secret in it)
    cause: str | None  # where the memo was mugraph's own server and it died: why, and what to do


class MeasuredEvent(TypedDict):
    """A μGraph (or the reference) timed on a GPU worker, beside the model's estimate."""

    event: Literal["measured"]
    fragment: str
    digest: str
    reference: bool
    estimated_seconds: float
    median_seconds: float | None
    device: str | None
    ok: bool | None
    error: str | None


class Reranked(TypedDict):
    """A fragment of a store ranked before by another cost model whose choice changed on ranking it
    again: the model and the chosen row's digest before (`was_reference`: the reference was kept)."""

    was_model: str
    was: str
    was_reference: bool


class DoneEvent(TypedDict):
    """The run's end (complete, or stopped by its time limit): the ranking, the chosen μGraphs, what
    this invocation did. The library entry adds the files it wrote (`profile`, `report`, `kernels`),
    the expert comparison (`expert`) and how to resume (`resume`)."""

    event: Literal["done"]
    store: str
    program: str
    complete: bool
    mugraphs: list[str]
    best: str
    best_per_fragment: dict[str, str]
    ranking: dict[str, list[RankedRow]]  # per fragment, the candidates (the reference apart)
    reference: dict[str, RankedRow]
    gpu_profile: str
    measured: dict[str, int]
    not_confident: list[str]  # fragments where a candidate is estimated faster, but within the model's error
    io_layouts: dict[str, dict[str, int]]
    no_layout: dict[str, list[str]]
    end_to_end_max_rel_err: float
    tasks_run: int
    confirms_run: int
    layouts_run: int
    tasks_done: int
    tasks_pending: int
    states: int
    solver_calls: int
    memo: dict[str, int]
    worker_busy_seconds: dict[str, float]
    worker_peak_rss_mib: dict[str, float]
    driver_peak_rss_mib: float
    store_bytes: int
    seconds: float
    profile: NotRequired[str | None]
    report: NotRequired[str | None]
    kernels: NotRequired[str | None]
    kernels_note: NotRequired[str | None]  # the kernels take other strides than the ranking assumed
    kernels_check: NotRequired[str | None]  # the command that runs the kernels against the program
    expert: NotRequired[str | None]
    resume: NotRequired[str | None]  # how to go on with a run that stopped before its end; None for a complete one
    reranked: NotRequired[dict[str, Reranked]]  # fragments whose choice changed with the cost model


ErrorKind = Literal["usage", "input", "storage", "os", "interrupted", "internal"]


class ErrorEvent(TypedDict):
    """The command line's closing event where no `done` comes (`optimize --json`): the run failed or
    stopped before its end. Never passed to `on_event`: the driver raises, and the command says it."""

    event: Literal["error"]
    error: str  # the one line stderr gets, without its "mugraph: error: " prefix
    kind: ErrorKind  # a bad option, bad input (program, store), a full disk, another OS error, ...
    exit_status: int  # the command's: 2 for bad input or storage, 130 for an interrupt, 1 for a fault


Event = (
    StartEvent
    | HistoryEvent
    | ProgressEvent
    | FoundEvent
    | ConfirmedEvent
    | LayoutEvent
    | LimitEvent
    | WorkersEvent
    | MemoLostEvent
    | MeasuredEvent
    | DoneEvent
)
EventSink = Callable[[Event], None]
