"""What the run knows of its results, and their commit to the store.

The driver is the store's only writer, and it writes before it acts: search results are staged as
they are handled and written in one batch (found μGraphs, children rows, done marks; a few file writes
however many tasks) before any child or confirmation is submitted, so a kill loses at most the tasks
that were running. Each new μGraph gets its confirmation task and each equivalent one its layout task;
the counters the results carry feed the run's totals, its progress and the space-size estimate.

Each find is stored with when the run made it: the run's seconds (this invocation's, after the
seconds of those before it, as the progress samples count them) at which the worker's walk verified
it, and the states the run had explored at its commit, the counters of the batch that found it
included; each confirmation with the run's seconds. A search cut at the time limit has its finds
stored and its task left pending (`SearchTaskResult.cut`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from mugraph.ir.canonical import replaces_find
from mugraph.ir.serialize import loads
from mugraph.pipeline.dispatch import Dispatch, confirm_priority
from mugraph.pipeline.events import ConfirmedEvent, Estimates, EventSink, LayoutEvent
from mugraph.pipeline.jobs import StagedResult
from mugraph.pipeline.plan import FragmentPlan, RunPlan
from mugraph.pipeline.progress import RunProgress
from mugraph.pipeline.records import SearchTaskResult
from mugraph.stages.layout.emitted import EmittedModel, model_for
from mugraph.stages.layout.profiles import GpuProfile
from mugraph.stages.search.estimate import SpaceEstimator
from mugraph.stages.search.explore import SearchCounters
from mugraph.storage.run.protocol import RunStoreWriter
from mugraph.storage.run.run_records import ConfirmationRecord, FragmentRecord, LayoutRecord, MeasurementRecord
from mugraph.storage.run.task_records import FoundRecord, TaskCompletion, TaskRecord, first_found

__all__ = ["Results", "RunTotals", "fragment_record"]


@dataclass
class RunTotals:
    """What this invocation did (the store holds the totals across restarts)."""

    tasks_run: int = 0
    confirms_run: int = 0
    layouts_run: int = 0
    counters: SearchCounters = field(default_factory=SearchCounters)
    memo: dict[str, int] = field(
        default_factory=lambda: {"local_hits": 0, "remote_hits": 0, "misses": 0, "remote_errors": 0}
    )
    busy: dict[str, float] = field(default_factory=dict)  # worker → seconds inside tasks
    peak_rss_mib: dict[str, float] = field(default_factory=dict)  # worker → its peak resident memory

    def add_search(self, result: SearchTaskResult) -> None:
        self.tasks_run += 1
        for k, v in result.counters.items():
            setattr(self.counters, k, getattr(self.counters, k) + type(getattr(self.counters, k))(v))
        for k, v in result.memo.items():
            self.memo[k] = self.memo.get(k, 0) + int(v)
        w = result.worker
        self.busy[w] = self.busy.get(w, 0.0) + result.seconds
        self.peak_rss_mib[w] = max(self.peak_rss_mib.get(w, 0.0), result.peak_rss_mib)


def fragment_record(fp: FragmentPlan) -> FragmentRecord:
    """A fragment as the store keeps it, written once at the start of every invocation."""
    return {
        "name": fp.spec.name,
        "digest": fp.payload.digest,
        "graph": fp.payload.reference,
        "config": fp.payload.config,
        "preset": fp.config.preset,
        "sources": list(fp.spec.sources),
        "outputs": list(fp.spec.outputs),
    }


def _find_times(result: SearchTaskResult, seconds: float, offset: float, wall: float) -> list[float]:
    """The run seconds at which each of a result's finds was made, from the wall-clock times its
    walk stamped (`SearchTaskResult.found_at`), for a commit at run seconds `seconds` and wall time
    `wall`; within this invocation and not after the commit, whatever a worker's clock says. A
    result without stamps (a replayed trace) has its finds at the commit."""
    stamps = result.found_at or [wall] * len(result.found)
    return [round(min(seconds, max(offset, seconds - (wall - stamp))), 3) for stamp in stamps]


class Results:
    """Per fragment, the μGraphs found, confirmed, laid out and measured, as in the store; and the
    search results handled but not yet committed."""

    def __init__(
        self,
        plan: RunPlan,
        store: RunStoreWriter,
        dispatch: Dispatch,
        io: Sequence[dict[str, int]],
        profile: GpuProfile,
        on_event: EventSink,
    ) -> None:
        self.plan = plan
        self.store = store
        self.dispatch = dispatch
        self.io = io
        self.profile = profile
        self.on_event = on_event
        self.totals = RunTotals()
        self.found: list[dict[str, FoundRecord]] = []
        self.confirmed: list[dict[str, ConfirmationRecord]] = []
        self.layouts: list[dict[str, LayoutRecord]] = []
        self.measured: list[dict[str, MeasurementRecord]] = []
        self.staged: list[StagedResult] = []  # handled, not yet committed
        self.reference_seconds: dict[int, float] = {}  # per fragment: the model's time for the reference
        self.estimated: dict[tuple[int, str], float] = {}  # per found μGraph: the model's time, once
        self.progress = RunProgress([fp.spec.name for fp in plan.fragments], [], [])
        self.estimator = SpaceEstimator()
        self.t0 = time.perf_counter()  # this invocation's start (the driver sets it with the sampler's)
        self.offset = 0.0  # the run's seconds before this invocation

    def run_seconds(self) -> float:
        """Seconds into the run across its invocations: the clock of the progress samples."""
        return self.offset + time.perf_counter() - self.t0

    def states(self) -> int:
        """States explored by the run so far, as the driver knows them (its done tasks' counters)."""
        return sum(int(c["nodes"]) for c in self.progress.counts.values())

    def load(self, tasks: Sequence[TaskRecord]) -> None:
        """Read what earlier invocations left in the store (`tasks` is its task table)."""
        store, n = self.store, len(self.plan.fragments)
        self.found = [store.found(i) for i in range(n)]
        self.confirmed = [store.confirmations(i) for i in range(n)]
        self.layouts = [store.layouts(i) for i in range(n)]
        self.measured = [store.measurements(i) for i in range(n)]
        self.progress = RunProgress([fp.spec.name for fp in self.plan.fragments], tasks, store.timeline())
        self.estimator = SpaceEstimator(sum(int(t.counters.get("nodes", 0)) for t in tasks if t.done))
        self.estimator.start([(t.fragment, *t.path) for t in tasks if not t.done])
        # Earlier invocations ran as long as their last samples say; a kill after a commit and before
        # the next sample leaves finds and confirmations later than that, and the clock never goes back.
        recorded = [r.seconds or 0.0 for found in self.found for r in found.values()]
        recorded += [float(c.get("run_seconds", 0.0)) for conf in self.confirmed for c in conf.values()]
        past = sum(float(inv[-1]["seconds"]) for inv in self.progress.history if inv)
        self.offset = max([past, *recorded])

    def layout_current(self, fragment: int, digest: str) -> bool:
        """A layout record exists and was solved for the strides this run asks for."""
        rec = self.layouts[fragment].get(digest)
        return rec is not None and rec.get("io_layouts", {}) == self.io[fragment]

    def commit(self) -> None:
        """Write the staged results to the store in one batch, then act on them: the results are
        durable (found μGraphs, children rows, done marks) before any child or confirmation runs."""
        if not self.staged:
            return
        staged, self.staged = self.staged, []
        seconds = round(self.run_seconds(), 3)
        wall = time.time()
        times = [_find_times(s.result, seconds, self.offset, wall) for s in staged]
        states = self.states() + sum(int(s.result.counters.get("nodes", 0)) for s in staged if not s.result.cut)
        dispatch = self.dispatch
        ranks = [dispatch.child_ranks(s.row, s.result.frontier_ranks) for s in staged]
        finds = [
            [
                FoundRecord(s.fragment, f.digest, tuple(f.path), f.graph, s.row, at, states)
                for f, at in zip(s.result.found, ts, strict=True)
            ]
            for s, ts in zip(staged, times, strict=True)
        ]
        done = [
            TaskCompletion(s.row, s.result.counters, s.result.worker, f, s.result.frontier, r, done=not s.result.cut)
            for s, f, r in zip(staged, finds, ranks, strict=True)
        ]
        child_rows = self.store.complete_tasks(done)
        children: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        for s, kids, kid_ranks, recs, ts in zip(staged, child_rows, ranks, finds, times, strict=True):
            row, fragment, result = s.row, s.fragment, s.result
            if result.cut:  # its finds only: the task stays pending, submitted again unless stopped
                dispatch.cut(row, result.path, fragment)
            else:
                dispatch.finished(row)
                self.totals.add_search(result)
                self.progress.on_search(fragment, result)
                self.estimator.finish(
                    (fragment, *result.path),
                    int(result.counters.get("nodes", 0)),
                    [(fragment, *c) for c in result.frontier],
                    result.frontier_estimates,
                )
            known = self.found[fragment]
            for f, rec, at in zip(result.found, recs, ts, strict=True):
                have = known.get(f.digest)
                if have is None:
                    known[f.digest] = rec
                    self.on_event(
                        {
                            "event": "found",
                            "fragment": self.plan.fragments[fragment].spec.name,
                            "digest": f.digest,
                            "path": list(f.path),
                            "seconds": at,
                            "states": states,
                        }
                    )
                    self.confirm(fragment, rec)
                elif replaces_find(rec.path, have.path):
                    known[f.digest] = first_found(rec, have)
            if not result.cut:
                dispatch.rank_rows(row, kids, kid_ranks)
                children.setdefault(fragment, []).extend(zip(kids, result.frontier, strict=True))
        for fragment, tasks in children.items():
            dispatch.searches(fragment, tasks)

    def on_confirm(self, fragment: int, digest: str, result: ConfirmationRecord) -> None:
        result = {**result, "run_seconds": round(self.run_seconds(), 3)}
        self.store.put_confirmation(fragment, digest, result)
        self.confirmed[fragment][digest] = result
        self.totals.confirms_run += 1
        event: ConfirmedEvent = {
            "event": "confirmed",
            "fragment": self.plan.fragments[fragment].spec.name,
            "digest": digest,
            "equivalent": result["equivalent"],
        }
        self.on_event(event)
        if result["equivalent"]:
            self.dispatch.layout(fragment, digest, self.found[fragment][digest].graph)

    def on_layout(self, fragment: int, digest: str, result: LayoutRecord) -> None:
        self.store.put_layout(fragment, digest, result)
        self.layouts[fragment][digest] = result
        self.totals.layouts_run += 1
        event: LayoutEvent = {
            "event": "layout",
            "fragment": self.plan.fragments[fragment].spec.name,
            "digest": digest,
            "objective": result.get("objective"),
            "solve_seconds": result.get("solve_seconds"),
            "error": result.get("error"),
            **self.estimates(fragment, digest, result),
        }
        self.on_event(event)

    def estimates(self, fragment: int, digest: str, result: LayoutRecord) -> Estimates:
        """The model's time for a μGraph now ranked and for its fragment's reference (what the final
        ranking will say, short of --measure), for the live page's best-so-far curve."""
        if "error" in result or digest not in self.found[fragment]:
            return {}
        return {
            "estimated_seconds": self._estimated_seconds(fragment, digest),
            "reference_seconds": self._reference_seconds(fragment),
        }

    def confirm(self, fragment: int, rec: FoundRecord) -> None:
        """Submit a found μGraph's confirmation at the priority of the model's speedup for it over
        its fragment's reference (`dispatch.confirm_priority`; about 0.3 ms to price)."""
        seconds = self._estimated_seconds(fragment, rec.digest)
        speedup = self._reference_seconds(fragment) / seconds if seconds > 0 else None
        self.dispatch.confirm(fragment, rec, confirm_priority(speedup))

    def _estimated_seconds(self, fragment: int, digest: str) -> float:
        """The model's time for a found μGraph, priced once (for its confirmation, then its layout)."""
        key = (fragment, digest)
        if key not in self.estimated:
            graph = loads(self.found[fragment][digest].graph)
            self.estimated[key] = self.cost_model.price(graph, None, self.profile)
        return self.estimated[key]

    @property
    def cost_model(self) -> EmittedModel:
        """The model the run prices and ranks with (a PyTorch model's: its ops as PyTorch runs them)."""
        return model_for(self.plan.program.from_torch)

    def _reference_seconds(self, fragment: int) -> float:
        """The model's time for the fragment's reference as its source runs it (as the ranking prices it)."""
        ref = self.reference_seconds.get(fragment)
        if ref is None:
            ref = self.cost_model.as_written().price(self.plan.fragments[fragment].spec.graph, None, self.profile)
            self.reference_seconds[fragment] = ref
        return ref
