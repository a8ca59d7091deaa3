"""The driver of one run: a Dask computation over the run store.

Search tasks explore one subtree each under a node budget; every result is written to the store
(found μGraphs, then the frontier as new task rows, then the task's done mark) before its frontier is
submitted (`as_completed(...).add`), so long subtrees split themselves and idle workers take the
pieces. The driver's cost per task is what bounds how many workers one driver feeds, so it works in
batches: the results that finished since it last looked are fetched in one `gather`, committed to the
store in one `complete_tasks` (pipeline.commit), and their children submitted in one `map` per
priority (pipeline.dispatch). A batch grows when the driver falls behind, and while the workers
have enough queued the driver also waits a little for it to grow (`linger_seconds`). Each new μGraph
is confirmed by its own task as soon as it is found, and each confirmed one gets a layout task
(z3.Optimize over its tensors' layouts). When every task is done, or the time limit has passed, the
run is ranked, stitched and checked (pipeline.finish).

This module holds the run's course: its start from what the store holds, the loop that waits for
results and stops at the time limit, and the handling of each finished task. The driver is the
store's only writer. Killing it loses at most the tasks that were running; the next run resubmits
every row not marked done. Task keys are `search-<fragment>-<id>`, `confirm-<fragment>-<digest>` and
`layout-<fragment>-<digest>`, so the Dask dashboard groups them by stage.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from distributed import Client, Future, wait

from mugraph.ir.errors import MugraphError
from mugraph.pipeline.cluster import (
    confirming_worker,
    dashboard_link,
    dashboard_taken,
    gpu_workers,
    start_workers,
)
from mugraph.pipeline.commit import Results, fragment_record
from mugraph.pipeline.dispatch import Dispatch, SearchFn
from mugraph.pipeline.events import DoneEvent, EventSink, StartEvent
from mugraph.pipeline.finish import finish
from mugraph.pipeline.interrupts import held
from mugraph.pipeline.jobs import ConfirmJob, LayoutJob, SearchJob, StagedResult
from mugraph.pipeline.lost_scheduler import scheduler_loss_said
from mugraph.pipeline.lost_workers import quiet_gather_retries
from mugraph.pipeline.measuring import NO_GPU
from mugraph.pipeline.plan import RunPlan
from mugraph.pipeline.records import SearchTaskResult, finds_only
from mugraph.pipeline.sampling import SCHEDULER_VIEW_SECONDS, Sampler
from mugraph.pipeline.watch import ClusterWatch
from mugraph.pipeline.worker import confirm_task, layout_task, search_task, warm_task
from mugraph.stages.layout.profiles import DEFAULT_PROFILE, GpuProfile, get_profile
from mugraph.stages.search.explore import SearchCounters
from mugraph.storage.run.protocol import RunStoreWriter

__all__ = ["COUNTER_NAMES", "Driver", "drain_seconds", "linger_seconds"]

COUNTER_NAMES = tuple(SearchCounters().as_dict())
GATHER_SECONDS = 30.0  # a batch of finished results, at most: longer means their worker died with them
RESULT_SECONDS = 5.0  # a finished task's result is a few KiB; longer means it was lost on the way
# Waiting for a longer batch (`linger_seconds`): at most LINGER_SECONDS, or a quarter of a bundle's
# seconds when bundles are longer (few workers, a deep queue: a result then waits less than the
# bundles already delay their paths), only while the queued tasks hold LINGER_COVER times as much
# work, and never past LINGER_BATCH results ready (a batch that long already shares its commit and its
# round trips well).
LINGER_SECONDS = 0.5
LINGER_SHARE = 4
LINGER_COVER = 4.0
LINGER_BATCH = 64
TASK_SECONDS_WEIGHT = 0.05  # of each new search task's seconds in the running mean
DRAIN_SECONDS = (10.0, 30.0)  # at least, at most: see `drain_seconds`
DRAIN_SHARE = 0.1
# At the time limit, how long the driver waits for the searches running then to come back with what
# they found: they stop at the limit themselves, within one node's expansion (`Dispatch.deadline`).
HARVEST_SECONDS = 5.0
_LOST = object()


def _result(fut: Future[Any]) -> Any:
    """A finished task's result, or `_LOST` when it went with a worker that died after finishing
    it. The scheduler then runs the task again, except a confirmation pinned to the dead worker,
    which `Dispatch.refresh` moves; waiting on such a future would wait forever."""
    if fut.status in ("lost", "pending"):
        return _LOST
    try:
        return fut.result(timeout=RESULT_SECONDS)
    except TimeoutError:
        return _LOST


def drain_seconds(time_limit: float | None) -> float:
    """How long a run stopped at its time limit waits for the confirmations and layouts of what it
    found: DRAIN_SHARE of the limit, within DRAIN_SECONDS (a confirmation takes 0.2-2 s on a CPU)."""
    low, high = DRAIN_SECONDS
    return min(high, max(low, DRAIN_SHARE * (time_limit or 0.0)))


def linger_seconds(queued: int, task_seconds: float, slots: int, bundle_seconds: float = 0.0) -> float:
    """How long the driver may wait for more results before handling those ready. A batch's commit (a
    few small files), its `gather` and its submissions cost about the same for one result as for ten,
    and with few workers results come one at a time; waiting lets batches grow as the queue allows.
    The wait is at most LINGER_SECONDS, or 1/LINGER_SHARE of the current `bundle_seconds` if longer,
    and only while the `queued` tasks (submitted, not running) hold LINGER_COVER times its length in
    expected work (their count times the mean task's `task_seconds`, over the `slots` worker
    threads), so no worker idles for it. Near the tree's start and end, where the workers wait for
    children, the queue is short and the driver does not wait."""
    if queued <= 0 or task_seconds <= 0:
        return 0.0
    cap = max(LINGER_SECONDS, bundle_seconds / LINGER_SHARE)
    return min(cap, queued * task_seconds / max(1, slots) / LINGER_COVER)


class Driver:
    """One invocation of a run: start from what the store holds, feed the cluster until no task is
    left or the time limit passes, then finish; `run()` returns the `done` event."""

    def __init__(
        self,
        plan: RunPlan,
        store: RunStoreWriter,
        client: Client,
        *,
        time_limit: float | None = None,
        on_event: EventSink | None = None,
        progress_interval: float = 1.0,
        profile: GpuProfile | None = None,
        io: Sequence[dict[str, int]] | None = None,
        measure: int = 0,
        search_fn: SearchFn = search_task,
        worker_env: Mapping[str, str] | None = None,
    ) -> None:
        self.plan = plan
        self.worker_env = dict(worker_env or {})  # what a local cluster's workers get (`worker_environment`)
        self.search_fn = search_fn  # the task function (a benchmark replays recorded results through it)
        self.profile = profile or get_profile(DEFAULT_PROFILE)
        # the user's strides, per fragment, as the run resolved them (`pipeline.plan.fragment_io_layouts`)
        self.io = list(io) if io is not None else [{} for _ in plan.fragments]
        self.store = store
        self.client = client
        self.time_limit = time_limit
        self.measure = measure  # time the model's best `measure` μGraphs of each fragment on a GPU worker
        self.on_event = on_event or (lambda e: None)
        self.progress_interval = progress_interval
        # the task functions are this module's names when the driver is made (a benchmark replaces them)
        self._dispatch = Dispatch(
            plan,
            client,
            self.io,
            search_fn=search_fn,
            confirm_fn=confirm_task,
            layout_fn=layout_task,
            warm_fn=warm_task,
        )
        self._results = Results(plan, store, self._dispatch, self.io, self.profile, self.on_event)
        self._sampler = Sampler(plan, store, client, self._dispatch, self._results, self.on_event)
        self.totals = self._results.totals
        self._t0 = 0.0
        self._task_seconds = 0.0  # a running mean of one search task's seconds (a bundle's, summed)
        self._watch = ClusterWatch(0, self.on_event)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> DoneEvent:
        quiet_gather_retries()  # a worker lost with results: the driver says what matters (`watch`)
        start_workers(self.client, self.worker_env)  # a local cluster's, now that the plugin is in
        self._t0 = self._sampler.t0 = self._results.t0 = time.perf_counter()
        store, plan, dispatch, results = self.store, self.plan, self._dispatch, self._results
        if self.time_limit is not None:  # the searches running at the limit stop there with their finds
            dispatch.deadline = time.time() + self.time_limit
        dispatch.gpu = gpu_workers(self.client) > 0
        if self.measure and not dispatch.gpu:
            raise MugraphError(NO_GPU)  # before anything is written
        dispatch.confirmer = None if dispatch.gpu else confirming_worker(self.client)
        dispatch.refresh(results.found)
        # both idempotent: a kill between them must not leave a store without its root tasks
        store.set_fragments([fragment_record(fp) for fp in plan.fragments])
        store.add_tasks([(i, (), -1) for i in range(len(plan.fragments))])
        tasks = store.tasks()
        dispatch.done = {t.row for t in tasks if t.done}
        pending = [t for t in tasks if not t.done]
        results.load(tasks)
        start: StartEvent = {
            "event": "start",
            "program": plan.program.name,
            "store": str(store.path),
            "resumed": not store.created,
            "fragments": [fp.spec.name for fp in plan.fragments],
            "presets": {fp.spec.name: fp.config.preset for fp in plan.fragments},
            "tasks_done": len(dispatch.done),
            "tasks_pending": len(pending),
            "workers": len(self.client.scheduler_info()["workers"]),
            "gpu_workers": dispatch.gpu,
            "dashboard": dashboard_link(self.client) or None,
            "dashboard_taken": dashboard_taken(self.client),
            "gpu_profile": self.profile.name,
            "invocation": results.progress.invocation,
        }
        self.on_event(start)
        self._watch.workers = start["workers"]
        if results.progress.history:
            self.on_event({"event": "history", "samples": results.progress.past_samples()})
        # a resumed run's pending rows keep the order the killed one would have run them in
        dispatch.ranks.update((t.row, t.rank) for t in pending if t.rank is not None)
        for i in range(len(plan.fragments)):
            dispatch.searches(i, [(t.row, t.path) for t in pending if t.fragment == i])
        dispatch.warm({t.fragment for t in pending})  # after: a worker takes its search task first
        for i, found in enumerate(results.found):
            for d, rec in sorted(found.items()):
                if d not in results.confirmed[i]:
                    results.confirm(i, rec)
                elif results.confirmed[i][d]["equivalent"] and not results.layout_current(i, d):
                    dispatch.layout(i, d, rec.graph)
        with scheduler_loss_said(self.client):
            try:
                stopped = self._loop()
                self.client.cancel(dispatch.warming)
                if stopped:
                    self._drain()
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: `status` and `report` still see how far it got
                self._sampler.write_last()
                raise
        if stopped:
            self.client.cancel(list(dispatch.what))
        self._sampler.sample(time.perf_counter(), final=True)
        deadline = None if self.time_limit is None else self._t0 + self.time_limit
        return finish(results, dispatch, complete=not stopped, measure=self.measure, deadline=deadline, t0=self._t0)

    def _loop(self) -> bool:
        """Handle results until no task is left; True when stopped by the time limit."""
        dispatch = self._dispatch
        ac = dispatch.ac
        last = viewed = time.perf_counter()
        while not ac.is_empty():
            now = time.perf_counter()
            if self._past_limit(now):
                return True
            if now - viewed >= SCHEDULER_VIEW_SECONDS:
                dispatch.refresh(self._results.found)
                self._watch.workers_now(dispatch.workers, now - self._t0)
                viewed = now
            if now - last >= self.progress_interval:
                self._sampler.sample(now)
                last = now
            if not self._wait_ready(self._before_limit(last + self.progress_interval - now)):
                continue
            self._linger()
            with held():  # a Ctrl-C waits for the batch's writes: a write cut short leaves the store unwritable
                stopped = self._handle(ac.next_batch(block=False))
                self._results.commit()
            if stopped:
                return True
        return False

    def _drain(self) -> None:
        """After the time limit: stop the search tasks, keeping what those running had found
        (`_harvest`; their rows stay pending in the store), and let the confirmations and layouts
        of what was found run on for up to `drain_seconds`, so a stopped run ranks the μGraphs it
        found, as a finished one does (`--time-limit 1` after an interrupted run confirms what that
        run found). What is left then stays unconfirmed."""
        what = self._dispatch.what
        self._dispatch.stopped = True
        searches = [fut for fut, job in what.items() if isinstance(job, SearchJob)]
        last = time.perf_counter()
        end = last + drain_seconds(self.time_limit)
        self._harvest(searches)
        self.on_event(
            {
                "event": "limit",
                "time_limit": float(self.time_limit or 0.0),
                "cancelled": len(searches),
                "checks": sum(isinstance(job, (ConfirmJob, LayoutJob)) for job in what.values()),
                "drain_seconds": drain_seconds(self.time_limit),
            }
        )
        while checks := [(fut, job) for fut, job in what.items() if isinstance(job, (ConfirmJob, LayoutJob))]:
            # by their futures, not `as_completed`'s queue: the batch that met the limit was taken from it
            for fut, job in checks:
                if fut.done():
                    with held():  # as in the loop: the write whole before a Ctrl-C
                        self._on_check(fut, job)
            now = time.perf_counter()
            if now >= end:
                return
            if now - last >= self.progress_interval:  # the progress line goes on saying what is confirmed
                self._sampler.sample(now)
                last = now
            left = end - now
            self._dispatch.ac.next_batch(block=False)  # woken by any task: none is handled from here
            self._wait_ready(min(left, self.progress_interval))

    def _harvest(self, searches: list[Future[Any]]) -> None:
        """At the time limit: cancel the search tasks not running, wait up to HARVEST_SECONDS for
        those running, which stop at the limit themselves (`Dispatch.deadline`), and store what
        they found, their tasks left pending; cancel any still running then."""
        what = self._dispatch.what
        jobs: dict[Future[Any], SearchJob] = {}
        for fut in searches:
            job = what.pop(fut)
            assert isinstance(job, SearchJob)
            jobs[fut] = job
        keys = {k for ks in self.client.processing().values() for k in ks}
        running = [fut for fut in searches if fut.key in keys or fut.status == "finished"]
        self.client.cancel([fut for fut in searches if fut.key not in keys and fut.status != "finished"])
        with contextlib.suppress(TimeoutError):
            wait(running, timeout=HARVEST_SECONDS)
        done = [fut for fut in running if fut.status == "finished"]
        self.client.cancel([fut for fut in running if fut.status != "finished"])
        bundles = self._gathered(done) if done else None
        if not bundles:
            return
        for fut, bundle in zip(done, bundles, strict=True):
            search = jobs[fut]
            for row, result in zip(search.rows, bundle, strict=False):
                self._results.staged.append(StagedResult(row, search.fragment, finds_only(result)))
        with held():  # as in the loop: the write whole before a Ctrl-C
            self._results.commit()

    def _on_check(self, fut: Future[Any], job: ConfirmJob | LayoutJob) -> None:
        """Record a finished confirmation or layout (a result lost with its worker is watched again)."""
        result = _result(fut)
        if result is _LOST:  # watched again until the scheduler (or `Dispatch.refresh`) redoes it
            self._dispatch.ac.add(fut)
            return
        del self._dispatch.what[fut]
        match job:
            case ConfirmJob(fragment, digest):
                self._results.on_confirm(fragment, digest, result)
            case LayoutJob(fragment, digest):
                self._results.on_layout(fragment, digest, result)
            case _:
                assert_never(job)

    def _before_limit(self, seconds: float) -> float:
        """`seconds`, cut at the time limit."""
        if self.time_limit is None:
            return seconds
        return min(seconds, self._t0 + self.time_limit - time.perf_counter())

    def _wait_ready(self, seconds: float) -> bool:
        """Whether a task has finished, waiting up to `seconds` for one. Woken by `as_completed`
        itself, so a result is handled the moment it arrives: each generation of a subtree's tasks
        waits for the driver once, and a fixed poll would add its period to every link of the task
        tree's longest chain."""
        ac = self._dispatch.ac
        cond = ac.thread_condition
        with cond:  # held while checking: a result put after the check notifies after the wait begins
            if not ac.has_ready() and seconds > 0:
                cond.wait(seconds)
        return bool(ac.has_ready())

    def _linger(self) -> None:
        """Wait a little for more results before handling a batch (`linger_seconds`), woken by each
        task that finishes, until LINGER_BATCH results are ready or the wait is over."""
        ac, slots = self._dispatch.ac, self._dispatch.slots
        ready = ac.queue.qsize()
        seconds = linger_seconds(ac.count() - ready - slots, self._task_seconds, slots, self._dispatch.span)
        if self.time_limit is not None:
            seconds = min(seconds, self._t0 + self.time_limit - time.perf_counter())
        deadline = time.perf_counter() + seconds
        cond = ac.thread_condition
        while ready < LINGER_BATCH:
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            with cond:  # notified on every task that finishes
                if ac.queue.qsize() == ready:
                    cond.wait(left)
            ready = ac.queue.qsize()

    def _handle(self, batch: list[Future[Any]]) -> bool:
        """Handle a batch of finished tasks: search results are fetched in one `gather` and staged
        for one commit. True when the time limit passed: a driver behind its workers gets long
        batches, so the limit is checked per result, and the results handled past it keep their
        finds only (`finds_only`): their tasks stay pending in the store and rerun on resume."""
        what = self._dispatch.what
        searches: list[tuple[Future[Any], SearchJob]] = []  # finished: fetched together below
        fetched: list[tuple[Future[Any], SearchJob, tuple[SearchTaskResult, ...]]] = []  # one by one (not finished)
        for fut in batch:
            job = what.get(fut)
            if job is None:  # a confirmation moved off a lost worker
                continue
            if isinstance(job, SearchJob) and fut.status == "finished":
                searches.append((fut, job))
                continue
            if self._past_limit(time.perf_counter()):
                return True
            if not isinstance(job, SearchJob):
                self._on_check(fut, job)
                continue
            result = _result(fut)
            if result is _LOST:  # watched again until the scheduler (or `Dispatch.refresh`) redoes it
                self._dispatch.ac.add(fut)
                continue
            fetched.append((fut, job, result))
        if searches:
            bundles = self._gathered([fut for fut, _ in searches])
            if bundles is None:  # their worker died with them: watched again until the scheduler redoes them
                for fut, _ in searches:
                    self._dispatch.ac.add(fut)
            else:
                fetched += [(fut, job, b) for (fut, job), b in zip(searches, bundles, strict=True)]
        past = False
        for fut, search, bundle in fetched:
            del what[fut]
            seconds = sum(r.seconds for r in bundle)
            weight = TASK_SECONDS_WEIGHT if self._task_seconds else 1.0
            self._task_seconds += weight * (seconds - self._task_seconds)
            if len(bundle) < len(search.rows):  # it stopped early and handed the rest back
                self._dispatch.handed_back(search, len(bundle))
            for row, result in zip(search.rows, bundle, strict=False):
                if past or self._past_limit(time.perf_counter()):  # its finds kept, nothing else handled
                    past = self._dispatch.stopped = True
                    self._results.staged.append(StagedResult(row, search.fragment, finds_only(result)))
                    continue
                self._dispatch.observe(result.path, result.seconds)
                self._on_search(row, search.fragment, result)
        return past

    def _gathered(self, futures: list[Future[Any]]) -> list[Any] | None:
        """The results of finished tasks in one round trip, or None where that took longer than
        GATHER_SECONDS: a worker that died holding them makes the client wait until the scheduler has
        run them again, for ever if no worker is left, and the loop must go on to say so (`watch`).
        `Client.gather` is `sync(_gather)` without a timeout; this is the same call with one."""
        try:
            gathered = self.client.sync(
                self.client._gather,
                futures,
                errors="raise",
                direct=None,
                local_worker=None,
                callback_timeout=GATHER_SECONDS,
            )
        except TimeoutError:
            return None
        return list(gathered)

    def _past_limit(self, now: float) -> bool:
        return self.time_limit is not None and now - self._t0 >= self.time_limit

    def _on_search(self, row: int, fragment: int, result: SearchTaskResult) -> None:
        """Stage a search result for the next commit."""
        self._watch.search_result(result)
        self._results.staged.append(StagedResult(row, fragment, result))
