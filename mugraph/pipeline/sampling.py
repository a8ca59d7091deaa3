"""Progress events while a run goes, and the writes of its timeline.

A progress event is built from what the driver already holds (the results' counters, the frontier it
submitted, the scheduler's view of what runs), never from a read of the store; the samples are kept
and written to the store's timeline now and then, so the live page and the report cover the whole
run across restarts and a kill loses only the last stretch of the curve.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import cast

from distributed import Client

from mugraph.pipeline.commit import Results
from mugraph.pipeline.dispatch import Dispatch
from mugraph.pipeline.events import EventSink, ProgressEvent
from mugraph.pipeline.interrupts import held
from mugraph.pipeline.plan import RunPlan
from mugraph.stages.search.estimate import SpaceEstimate, SpaceEstimator
from mugraph.storage.run.protocol import RunStoreWriter

__all__ = [
    "ESTIMATE_AFTER_TASKS",
    "SCHEDULER_VIEW_SECONDS",
    "TIMELINE_WRITE_FIRST",
    "TIMELINE_WRITE_FRACTION",
    "TIMELINE_WRITE_SECONDS",
    "Sampler",
    "shown_estimate",
    "timeline_write_interval",
]

TIMELINE_WRITE_SECONDS = 30.0
TIMELINE_WRITE_FIRST = 5.0  # the first minutes: a quarter of the time run, from every 5 s up to every 30 s
TIMELINE_WRITE_FRACTION = 0.04
# How often the driver asks the scheduler for its workers and for the tasks they hold: each is a round
# trip through both event loops (over TLS on a local cluster) whose answer grows with the workers.
# Asking every 5 s instead of every second: on 150 s of lora with 2 workers the driver's CPU went 4.36
# → 3.45 s (one run each); over lora's whole space no difference showed (13.92 and 13.96 s;
# benchmarks/RESULTS.md, "The driver's CPU on a real run").
SCHEDULER_VIEW_SECONDS = 5.0
# The size and ETA are shown once this many tasks of the invocation have finished: from the root's
# probes alone gqa's space read 31.7 k states (it holds 50 M); after 16-30 tasks, within about 10x.
ESTIMATE_AFTER_TASKS = 16


def shown_estimate(estimator: SpaceEstimator) -> SpaceEstimate | None:
    """The size estimate a progress event carries: none until ESTIMATE_AFTER_TASKS tasks of this
    invocation have finished (or none is pending), since the first probes are far off."""
    size = estimator.estimate()
    if size is not None and size.pending_tasks and estimator.finished_tasks < ESTIMATE_AFTER_TASKS:
        return None
    return size


def timeline_write_interval(elapsed: float) -> float:
    """Seconds between writes of the invocation's progress samples: a quarter of the time run so far
    between 5 s and 30 s, then 4% of it (`status` and `report` beside a run read the timeline: with a
    first period of 30 s, at 20 s they read its first sample, the states of one task). The samples
    are thinned to a fixed number (pipeline.progress), so a write
    costs the same after an hour as after a minute (12-17 ms of CPU for lora's). The driver's whole
    budget with 2 workers is about 1.6% of a core (1/128 of their task time): writes every 15 s and
    then at 2% took 0.47 of the 6.9 CPU s of one whole lora run (40 writes in 582 s). A kill loses at
    most the last 30 s or 4% of the curve; the task table, not the timeline, is what resumes."""
    early = min(TIMELINE_WRITE_SECONDS, max(TIMELINE_WRITE_FIRST, elapsed / 4))
    return max(early, TIMELINE_WRITE_FRACTION * elapsed)


class Sampler:
    """Builds, keeps and emits the progress samples of one invocation; `t0` is when it started."""

    def __init__(
        self,
        plan: RunPlan,
        store: RunStoreWriter,
        client: Client,
        dispatch: Dispatch,
        results: Results,
        on_event: EventSink,
    ) -> None:
        self.plan = plan
        self.store = store
        self.client = client
        self.dispatch = dispatch
        self.results = results
        self.on_event = on_event
        self.t0 = 0.0
        self._timeline_written = -TIMELINE_WRITE_SECONDS  # the first sample is written at once
        self._running: dict[str, int] = {}
        self._running_at = -SCHEDULER_VIEW_SECONDS

    def running(self) -> dict[str, int]:
        """Search tasks a worker holds, per fragment: the scheduler's view, asked for at most every
        SCHEDULER_VIEW_SECONDS (the progress caps it by the tasks in flight, so it never exceeds them)."""
        now = time.perf_counter()
        if now - self._running_at >= SCHEDULER_VIEW_SECONDS:
            self._running = self._processing()
            self._running_at = now
        return self._running

    def _processing(self) -> dict[str, int]:
        try:
            processing = self.client.processing()
        except Exception:  # a scheduler going away ends the run elsewhere; progress is best effort
            return {}
        out: Counter[str] = Counter()
        for keys in processing.values():
            for key in keys:
                text = str(key)
                if text.startswith("search-"):
                    out[text[len("search-") :].rsplit("-", 1)[0]] += 1
        return dict(out)

    def progress(self) -> ProgressEvent:
        results, dispatch = self.results, self.dispatch
        names = [fp.spec.name for fp in self.plan.fragments]
        inflight = Counter({names[i]: n for i, n in dispatch.inflight_per_fragment.items()})
        running = {f: min(n, inflight[f]) for f, n in self.running().items()}
        pending = {f: inflight[f] - running.get(f, 0) for f in names}
        found = {names[i]: len(f) for i, f in enumerate(results.found)}
        confirmed = {
            names[i]: sum(1 for r in conf.values() if r["equivalent"]) for i, conf in enumerate(results.confirmed)
        }
        event = results.progress.event(
            time.perf_counter() - self.t0, results.totals.tasks_run, running, pending, found, confirmed
        )
        size = shown_estimate(results.estimator)  # the space's estimated size and the ETA, once known
        if size:  # as_json's keys are the sample's estimated_states, estimated_fraction and eta_seconds
            event.update(cast(ProgressEvent, size.as_json(event.get("states_per_s_searching") or 0.0)))
        return event

    def write_last(self) -> None:
        """Keep a last sample and write the timeline, emitting nothing: for a run interrupted between
        writes, whose size estimate and rate `status` and `report` would otherwise not see. Best
        effort: a store that cannot be written leaves the timeline as it was."""
        try:
            with held():  # an interrupt delivered again (one a finalizer dropped) waits for the write
                self._running_at = time.perf_counter()  # the last view of the scheduler: no call to it now
                progress = self.results.progress
                progress.record(self.progress())
                self.store.put_timeline(progress.invocation, progress.samples)
        except Exception:
            pass

    def sample(self, now: float, final: bool = False) -> None:
        """Keep a progress sample, write the timeline now and then, and emit the event. The write
        comes first, so an invocation killed as soon as its first event is seen is in the timeline."""
        progress = self.results.progress
        event = self.progress()
        progress.record(event)
        if final or now - self._timeline_written >= timeline_write_interval(now - self.t0):
            with held():  # whole, or the store refuses the last sample an interrupt writes
                self.store.put_timeline(progress.invocation, progress.samples)
            self._timeline_written = now
        self.on_event(event)
