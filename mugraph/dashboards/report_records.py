"""What the end-of-run report holds, as typed records: `report.report_data` fills them from the run
store, `report_sections` renders them, and the page embeds them as JSON (what tests compare with the
store). Kept apart so that reading and rendering both name them without importing each other."""

from __future__ import annotations

from typing import Any, TypedDict

from mugraph.dashboards.summary import Headline, SizeRecord
from mugraph.stages.layout.costs import LayoutsJSON
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.run_records import FinalRecord, ProgressSample


class TimelineSample(ProgressSample):
    """A stored progress sample on the whole run's time axis (see `report._timeline`)."""

    elapsed: float
    states_per_s_now: float | None


class FragmentSummary(TypedDict):
    name: str
    preset: str | None
    digest: str
    sources: Any  # the fragment plan's JSON, as stored
    outputs: Any
    tasks_done: int
    tasks_pending: int
    found: int
    confirmed: int
    layouts: int
    best: str | None
    best_is_reference: bool


class ChosenGraph(TypedDict):
    digest: str
    graph: str  # ir.serialize JSON
    layouts: LayoutsJSON | None


class TaskCounts(TypedDict):
    total: int
    done: int
    pending: int


class WorkerBusy(TypedDict):
    busy_seconds: float
    tasks: int


class RunMeta(TypedDict, total=False):
    """What a run store's free-form meta holds when `optimize` made it: the command line and the
    versions of the packages that ran it."""

    command: list[str]
    versions: dict[str, str]


class ReportData(TypedDict):
    """Everything the report shows, as `report_data` reads it from the store; embedded in the page as
    JSON (so `read_report_data` gives it back with tuples as lists)."""

    store: str
    identity: dict[str, str]  # the run's identity record
    meta: RunMeta
    final: FinalRecord | None
    tasks: TaskCounts
    counters: dict[str, float]
    fragments: list[FragmentSummary]
    timeline: list[TimelineSample]
    restarts: list[float]
    size: SizeRecord | None
    invocations: int
    workers: dict[str, WorkerBusy]
    best_so_far: dict[str, list[tuple[float, float]]]
    experts: dict[str, str]  # canonical digest -> the expert label its ranking row is marked with
    expert_notes: dict[str, str]
    ranking: dict[str, list[RankedRow]]
    provisional: list[str]  # fragments ranked from what the store holds so far (the run has not ended)
    headlines: dict[str, Headline | None]
    chosen: dict[str, ChosenGraph]
    generated: str
