"""What the driver sends to the cluster, and where: search paths bundled per priority, one confirmation
per found μGraph, one layout task per confirmed one, and the workers' warm-up tasks.

Search tasks run the paths that stray least from the search order's first choices first: each
task's rank (`stages.search.task_paths`) is the rank of the task that left it plus its rank below
that task's path, as the worker reports it. A run stopped early (a user's time limit) then holds the
children the cost order puts first at every level of the tree, where shallower paths first spent it
on every shallow subtree (gqa, 180 s on 2 workers: see benchmarks/RESULTS.md). The store keeps each
row's rank, so a resumed run's pending rows keep their order. A row whose rank is unknown (a replayed
trace records none, nor a store written before ranks were kept) runs shallower first, the order the
scale replays measured: at 256 workers with no overhead, deeper-first gave lora and gqa 86% and 70%
of the lower bound (total task seconds over the workers, or the longest chain), shallower-first 86%
and 86% (benchmarks/RESULTS.md, "Scale"). The nodes visited do not depend on the order.

Every future is watched in one `as_completed` and remembered with the job it is, so the driver's loop
knows what each result belongs to. The frontier's bookkeeping (rows running, rows done) lives here
too, since it is what keeps a path from being submitted twice. The task functions are given, not
imported, so a benchmark can replay recorded results through the same submission code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from distributed import Client, Future, as_completed

from mugraph.pipeline.bundling import RANK_FLOOR, DepthTimes, plan_bundles, rank_priority
from mugraph.pipeline.cluster import confirming_worker
from mugraph.pipeline.jobs import ConfirmJob, Job, LayoutJob, Placement, SearchJob
from mugraph.pipeline.plan import RunPlan
from mugraph.pipeline.records import SearchTaskResult
from mugraph.pipeline.task_keys import bundle_key
from mugraph.pipeline.worker import MAX_SEARCHERS
from mugraph.stages.search.task_paths import task_budget
from mugraph.storage.run.run_records import LayoutRecord
from mugraph.storage.run.store import FoundRecord

__all__ = ["CONFIRM_PRIORITY", "LAYOUT_PRIORITY", "WARM_PRIORITY", "Dispatch", "SearchFn", "confirm_priority"]

# (payload, paths, node budget, seconds after which a bundle hands back its unstarted paths); and,
# in a run with a time limit, a fifth: its wall-clock deadline (`worker.search_task`)
SearchFn = Callable[..., tuple[SearchTaskResult, ...]]
WARM_PRIORITY = -(1 << 20)  # below every search task: a busy worker warms up once its queue is empty
assert WARM_PRIORITY < RANK_FLOOR
LAYOUT_PRIORITY = 50  # above every search task: a confirmed μGraph is laid out at once
CONFIRM_PRIORITY = 100  # above layouts; a found μGraph's estimated speedup adds to it
CONFIRM_SPREAD = 100_000  # speedups are told apart to 1/100 up to 1,000x


def confirm_priority(speedup: float | None) -> int:
    """A confirmation's Dask priority: every one runs before any layout or search task, the μGraphs
    the cost model expects fastest first (None: no estimate, last). A run stopped by its time limit
    ranks only what was confirmed, and a search finds μGraphs faster than one worker confirms them
    (rms_norm: 46 in 6 s, 0.17 s each to confirm), so the order of the queue is what a stopped run
    holds."""
    if speedup is None or not speedup > 0:
        return CONFIRM_PRIORITY
    return CONFIRM_PRIORITY + 1 + min(CONFIRM_SPREAD, round(100 * speedup))


class Dispatch:
    """The driver's side of the cluster: submission, placement and the futures it watches."""

    def __init__(
        self,
        plan: RunPlan,
        client: Client,
        io: Sequence[dict[str, int]],
        *,
        search_fn: SearchFn,
        confirm_fn: Callable[..., Any],
        layout_fn: Callable[[str, str, dict[str, int]], LayoutRecord],
        warm_fn: Callable[..., Any],
    ) -> None:
        self.plan = plan
        self.client = client
        self.io = io  # the user's strides, per fragment
        self.search_fn = search_fn
        self.confirm_fn = confirm_fn
        self.layout_fn = layout_fn
        self.warm_fn = warm_fn
        self.ac: as_completed = as_completed()
        self.what: dict[Future[Any], Job] = {}
        self.inflight: set[int] = set()
        self.inflight_per_fragment: Counter[int] = Counter()  # the progress line's, kept as rows come and go
        self.done: set[int] = set()
        self.row_place: dict[int, tuple[int, int]] = {}  # a row in flight: its fragment and path length
        self.warming: list[Future[Any]] = []
        self.gpu = False
        self.confirmer: str | None = None  # the worker all confirmations go to (no GPU)
        self.confirm_moves = 0
        self.slots = 1  # worker threads in the cluster (`refresh`)
        self.workers = 0  # workers in the cluster when `refresh` last asked
        self.times = DepthTimes()  # recent search tasks' seconds, per depth: they size the bundles
        self.span = 0.0  # the seconds of the last batch's bundles
        self.queued_depths: Counter[int] = Counter()  # search rows in flight, per path length
        self.ranks: dict[int, int] = {}  # a search row's rank, where known, until it is done
        self.deadline: float | None = None  # the run's time limit, wall-clock: search tasks cut there
        self.stopped = False  # past the time limit: nothing more is searched

    def child_ranks(self, row: int, below: Sequence[int] | None) -> list[int] | None:
        """The ranks of the children search row `row` left: its rank (0 where unknown) plus theirs
        below its path (`below`, from the worker; None from a replayed trace: unranked)."""
        if below is None:
            return None
        base = self.ranks.get(row, 0)
        return [base + rank for rank in below]

    def rank_rows(self, row: int, kids: Sequence[int], ranks: Sequence[int] | None) -> None:
        """Search row `row` is done and left the rows `kids` with `ranks` (`child_ranks`); rows
        resumed from the store come with the ranks it kept (`ranks` None: left unranked)."""
        self.ranks.pop(row, None)
        if ranks is not None:
            self.ranks.update(zip(kids, ranks, strict=True))

    def observe(self, path: Sequence[int], seconds: float) -> None:
        """A search path finished in `seconds`: it sizes the bundles of later paths at its depth."""
        self.times.observe(len(path), seconds)

    def searches(self, fragment: int, tasks: Iterable[tuple[int, tuple[int, ...]]]) -> None:
        """Submit the (row, path) search tasks not running or done yet, bundled by `plan_bundles`: one
        `map` per priority, so a batch of children costs the scheduler a message per priority, not one
        per task."""
        if self.stopped:  # the rows stay pending in the store
            return
        fp = self.plan.fragments[fragment]
        batch: list[tuple[int, tuple[int, ...]]] = []
        for row, path in tasks:
            if row in self.inflight or row in self.done:
                continue
            self.inflight.add(row)
            self.inflight_per_fragment[fragment] += 1
            self.row_place[row] = (fragment, len(path))
            self.queued_depths[len(path)] += 1
            batch.append((row, path))
        if not batch:
            return
        ranks = self.ranks
        ranked = all(row in ranks for row, _ in batch)
        priorities = [rank_priority(ranks[row]) for row, _ in batch] if ranked else None
        plan = plan_bundles([p for _, p in batch], self.queued_depths, self.times, self.slots, priorities=priorities)
        self.span = plan.seconds
        by_priority: dict[int, list[tuple[int, ...]]] = {}
        for priority, members in plan.tasks:
            by_priority.setdefault(priority, []).append(members)
        for priority, split in sorted(by_priority.items(), reverse=True):
            rows = [tuple(batch[i][0] for i in m) for m in split]
            paths = [tuple(batch[i][1] for i in m) for m in split]
            args: list[list[Any]] = [
                [fp.payload] * len(split),
                list(paths),
                [task_budget(ps[0], self.plan.budget) for ps in paths],
                [2 * plan.seconds] * len(split),
            ]
            if self.deadline is not None:
                args.append([self.deadline] * len(split))
            futs = self.client.map(
                self.search_fn,
                *args,
                key=[bundle_key(fp, ps) for ps in paths],
                pure=False,
                priority=priority,
            )
            for fut, rs, ps in zip(futs, rows, paths, strict=True):
                self.what[fut] = SearchJob(rs, fragment, ps)
            self.ac.update(futs)

    def handed_back(self, job: SearchJob, explored: int) -> None:
        """Submit again the paths of a bundle that stopped after its first `explored` ones."""
        rest = list(zip(job.rows[explored:], job.paths[explored:], strict=True))
        for row, _ in rest:
            self._landed(row)
        self.searches(job.fragment, rest)

    def cut(self, row: int, path: tuple[int, ...], fragment: int) -> None:
        """Search row `row` came back cut at the deadline: pending still, submitted again unless
        the run has stopped (a worker whose clock runs ahead of the driver's cuts early)."""
        self._landed(row)
        self.searches(fragment, [(row, path)])

    def finished(self, row: int) -> None:
        """A search row's result is in the store: it is done and no longer in flight."""
        self._landed(row)
        self.done.add(row)

    def _landed(self, row: int) -> None:
        """`row` is no longer in flight (its result came back, or its path was handed back)."""
        if row in self.inflight:
            self.inflight.discard(row)
            fragment, depth = self.row_place.pop(row)
            self.inflight_per_fragment[fragment] -= 1
            self.queued_depths[depth] -= 1

    def confirm(self, fragment: int, rec: FoundRecord, priority: int = CONFIRM_PRIORITY) -> None:
        fp = self.plan.fragments[fragment]
        placement: Placement = {}
        if self.gpu:
            placement = {"resources": {"GPU": 1}}
        elif self.confirmer is not None:  # pinned; `refresh` moves them if it leaves
            placement = {"workers": [self.confirmer], "allow_other_workers": False}
        moved = f"-{self.confirm_moves}" if self.confirm_moves else ""  # a new key once moved
        fut = self.client.submit(
            self.confirm_fn,
            fp.payload,
            rec.digest,
            rec.graph,
            key=f"confirm-{fp.spec.name}-{rec.digest[:16]}{moved}",
            pure=False,
            priority=priority,
            **placement,
        )
        self.what[fut] = ConfirmJob(fragment, rec.digest, priority)
        self.ac.add(fut)

    def layout(self, fragment: int, digest: str, graph: str) -> None:
        fp = self.plan.fragments[fragment]
        fut = self.client.submit(
            self.layout_fn,
            digest,
            graph,
            self.io[fragment],
            key=f"layout-{fp.spec.name}-{digest[:16]}",
            pure=False,
            priority=LAYOUT_PRIORITY,
        )
        self.what[fut] = LayoutJob(fragment, digest)
        self.ac.add(fut)

    def warm(self, fragments: set[int]) -> None:
        """Have every worker build its state for the fragments still to search while the first
        tasks run. Pinned to their worker and never waited for: a worker already busy runs its
        warm-up later, when it costs nothing (the state exists by then); a lost one takes its
        warm-up with it."""
        first = sorted(fragments)[:MAX_SEARCHERS]  # a worker keeps no more searchers than that
        for w in sorted(self.client.scheduler_info()["workers"]):
            for i in first:
                fp = self.plan.fragments[i]
                self.warming.append(
                    self.client.submit(
                        self.warm_fn,
                        fp.payload,
                        w == self.confirmer,
                        workers=[w],
                        allow_other_workers=False,
                        pure=False,
                        priority=WARM_PRIORITY,
                        key=f"warm-{fp.spec.name}-{w}",
                    )
                )

    def refresh(self, found: Sequence[Mapping[str, FoundRecord]]) -> None:
        """Ask the scheduler once for its workers: count their threads (`slots`), and if the confirming
        worker has left, move its confirmations to another one (they are pinned to it, so nothing else
        would ever run them). `Client.scheduler_info()` is a round trip to the scheduler, not a cache."""
        workers = self.client.scheduler_info()["workers"]
        self.workers = len(workers)
        self.slots = sum(int(w.get("nthreads", 1)) for w in workers.values()) or 1
        if self.confirmer is None or self.confirmer in workers:
            return
        self.confirmer = confirming_worker(self.client)
        self.confirm_moves += 1
        moved = [(fut, job) for fut, job in self.what.items() if isinstance(job, ConfirmJob)]
        for fut, job in moved:
            del self.what[fut]
            fut.cancel()
            self.confirm(job.fragment, found[job.fragment][job.digest], job.priority)
