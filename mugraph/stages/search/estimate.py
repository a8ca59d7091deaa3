"""How big the search space is, and how much of it is done: Knuth's estimator of a backtracking tree,
refined as tasks finish.

Knuth (1975): walk from a node to a leaf choosing a child uniformly at random; with d_i the number
of children met at depth i, 1 + d_1 + d_1 d_2 + ... is an unbiased estimate of the number of nodes
in the subtree. Here the children are the ones the search keeps (listed and kept by the oracle),
so the estimate counts exactly what `explore` expands. A task's subtree (or sibling run) gets the
mean of a few probes, seeded by its path, so every machine gives the same number.

The run's estimate is then the states already expanded (exact) plus the estimates of the pending
tasks. As the run proceeds the exact part grows and the estimated part shrinks, so the error
falls, and it is zero once nothing is pending. A pending task without its own estimate (one left
by an earlier invocation) counts as the mean subtree of the finished tasks at its depth.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mugraph.stages.search.collector import collector_paused
from mugraph.stages.search.expand import child_list, kept_indices
from mugraph.stages.search.explore import Searcher
from mugraph.stages.search.nodes import BlockNode
from mugraph.stages.search.state import State
from mugraph.stages.search.task_paths import Path, split_run

PROBES = 4  # probes per task: each costs about one node expansion per level of the tree
ROW_PROBES = 8  # at most, for a block structure node's task: one per row stratum up to this many
PROBED_TASKS = 8  # frontier tasks probed per finished task (the rest count as their probed neighbours)


def _rng(path: Sequence[int], salt: int) -> random.Random:
    seed = hashlib.sha256(f"{list(path)}|{salt}".encode()).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))


def probe(searcher: Searcher, node: Path, rng: random.Random, max_depth: int = 64) -> float:
    """One Knuth probe of the subtree at `node` (a node's path): its estimated number of states. A
    block structure node's subtree is its rows' subtrees in the instantiated tree (`expand`), so
    the probe follows one row, chosen at random, and weighs it by the number of rows: its cost is
    one state's expansion per level, whatever a node carries."""
    start = searcher.node(node)
    if isinstance(start, BlockNode):
        if not start.rows:
            return 0.0
        return start.size * _instance_probe(searcher, start.instance(rng.choice(start.rows)), rng, max_depth)
    return _instance_probe(searcher, start, rng, max_depth)


def _instance_probe(searcher: Searcher, state: State, rng: random.Random, max_depth: int) -> float:
    """Knuth's sum down the instantiated tree from `state`: each level's state weighed by the
    product of the branching factors above it. Its steps that open a block graph before choosing
    the for-loop are not states of the search (weight 0)."""
    cfg, outputs = searcher.fragment.config, len(searcher.fragment.output_names)
    size, weight = 1.0, 1.0
    for _ in range(max_depth):
        kids = child_list(state, cfg, outputs, searcher.tables.table)
        kept = kept_indices(kids, cfg, outputs, searcher.oracle.kept)
        if not kept:
            break
        weight *= len(kept)
        state = kids[rng.choice(kept)].build()
        if state.block is None or state.block.configured:
            size += weight
    return size


def task_size(searcher: Searcher, task: Path, probes: int = PROBES) -> float:
    """Estimated states of a task: a subtree, or a run of sibling subtrees (the run's length times a
    probe of one of them, chosen at random). A block structure node's subtree gets a probe per row,
    up to `ROW_PROBES`, each from its own stratum of the rows: its rows' subtrees differ more than a
    few probes average out."""
    run = split_run(task)
    if run is None and isinstance(node := searcher.node(task), BlockNode) and len(node.rows) > probes:
        rows = len(node.rows)
        n = min(rows, ROW_PROBES)
        total = 0.0
        for k in range(n):
            row = node.rows[_rng(task, k).randrange(k * rows // n, (k + 1) * rows // n)]
            total += _instance_probe(searcher, node.instance(row), _rng(task, k), 64)
        return rows * total / n
    siblings = searcher.run_members(run) if run is not None else []
    total = 0.0
    for n in range(probes):
        rng = _rng(task, n)
        if run is None:
            total += probe(searcher, task, rng)
        elif siblings:
            total += len(siblings) * probe(searcher, rng.choice(siblings), rng)
    return total / probes


def frontier_estimates(searcher: Searcher, frontier: Sequence[Path], limit: int = PROBED_TASKS) -> list[float | None]:
    """Estimates for a task's frontier: at most `limit` tasks, spread evenly over it, are probed
    (None for the others), so a task with a wide frontier (the root's has one task per kept child)
    spends a bounded time on probes."""
    n = len(frontier)
    chosen = set(range(n)) if n <= limit else {round(i * (n - 1) / (limit - 1)) for i in range(limit)}
    with collector_paused():
        return [task_size(searcher, t) if i in chosen else None for i, t in enumerate(frontier)]


def _add(acc: list[float], value: float) -> None:
    acc[0] += value
    acc[1] += 1


@dataclass
class SpaceEstimate:
    """The run's states: expanded so far (exact) and estimated still to come."""

    done: int
    pending: float
    pending_tasks: int

    @property
    def total(self) -> float:
        return self.done + self.pending

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total > 0 else 1.0

    def eta_seconds(self, states_per_s: float) -> float | None:
        """Seconds left at `states_per_s`; None while the rate is unknown."""
        if self.pending_tasks == 0:
            return 0.0
        return self.pending / states_per_s if states_per_s > 0 else None

    def as_json(self, states_per_s: float) -> dict[str, float | int | None]:
        eta = self.eta_seconds(states_per_s)
        return {
            "estimated_states": round(self.total),
            "estimated_fraction": round(self.fraction, 4),
            "eta_seconds": None if eta is None else round(eta, 1),
        }


@dataclass
class SpaceEstimator:
    """Refined as tasks finish: each finished task adds its states and replaces itself, in the pending
    set, by its frontier tasks with their estimates. A task is keyed by its path (or any tuple that
    ends with it, such as (fragment, *path): only the key's length, its depth, is read).

    The driver asks for the estimate every second while thousands of tasks are pending, so the sum
    is kept as tasks come and go: the probed estimates' total, and the unprobed tasks' count per
    depth (each counts as its depth's fallback). An estimate costs O(depths), not O(pending).

    (Correcting pending probes by the ratio of true to estimated size over probed subtrees that had
    finished was tried: on rms_norm's, lora's and gated_mlp's spaces it helped at some points of a
    run and hurt at others, so the estimates stay Knuth's own.)"""

    done: int = 0
    pending: dict[tuple[int, ...], float | None] = field(default_factory=dict)
    # [sum, count] per depth: whole subtrees finished, and probe estimates made; and every finished task
    _sizes: dict[int, list[float]] = field(default_factory=dict)
    _probed: dict[int, list[float]] = field(default_factory=dict)
    _finished: list[float] = field(default_factory=lambda: [0.0, 0.0])
    # the pending tasks' own estimates, [sum, count]; and how many pending tasks at each depth have none
    _pending_probed: list[float] = field(default_factory=lambda: [0.0, 0.0])
    _unprobed: dict[int, int] = field(default_factory=dict)

    def _put(self, task: tuple[int, ...], e: float | None) -> None:
        self._drop(task)
        self.pending[task] = e
        if e is not None and math.isfinite(e):
            _add(self._pending_probed, e)
        else:
            self._unprobed[len(task)] = self._unprobed.get(len(task), 0) + 1

    def _drop(self, task: tuple[int, ...]) -> None:
        if task not in self.pending:
            return
        e = self.pending.pop(task)
        if e is not None and math.isfinite(e):
            total = self._pending_probed
            total[0] -= e
            total[1] -= 1
            if not total[1]:
                total[0] = 0.0  # no rounding left behind once none is pending
        else:
            left = self._unprobed[len(task)] - 1
            if left:
                self._unprobed[len(task)] = left
            else:
                del self._unprobed[len(task)]

    def start(self, tasks: Iterable[tuple[int, ...]], estimates: Iterable[float | None] | None = None) -> None:
        """Tasks pending at the start (the root, or what an earlier invocation left)."""
        tasks = list(tasks)
        for t, e in zip(tasks, estimates if estimates is not None else [None] * len(tasks), strict=True):
            self._put(t, e)

    def add_done(self, states: int) -> None:
        """States of tasks finished in an earlier invocation."""
        self.done += states

    def finish(
        self,
        task: tuple[int, ...],
        states: int,
        frontier: Sequence[tuple[int, ...]],
        estimates: Sequence[float | None] | None = None,
    ) -> None:
        self._drop(task)
        self.done += states
        _add(self._finished, states)
        if not frontier:
            _add(self._sizes.setdefault(len(task), [0.0, 0.0]), states)
        for i, t in enumerate(frontier):
            e = estimates[i] if estimates is not None else None
            self._put(t, e)
            if e is not None:
                _add(self._probed.setdefault(len(t), [0.0, 0.0]), e)

    def _fallback(self, depth: int) -> float | None:
        """A pending task's size without a probe: the mean probe estimate at its depth, else the mean
        whole subtree finished at its depth (or the nearest depth with one), else the mean finished
        task; None before any task has finished."""
        probed = self._probed.get(depth)
        if probed:
            return probed[0] / probed[1]
        if self._sizes:
            nearest = min(self._sizes, key=lambda d: (abs(d - depth), d))
            return self._sizes[nearest][0] / self._sizes[nearest][1]
        return self._finished[0] / self._finished[1] if self._finished[1] else None

    @property
    def finished_tasks(self) -> int:
        """Tasks finished in this invocation: what the probes' spread is judged by."""
        return int(self._finished[1])

    def estimate(self) -> SpaceEstimate | None:
        """The estimate now; None while some pending task has neither a probe nor a finished task to
        stand for it (before the first task of a run finishes)."""
        rest = self._pending_probed[0]
        for depth, count in self._unprobed.items():
            size = self._fallback(depth)
            if size is None:
                return None
            rest += count * size
        return SpaceEstimate(self.done, rest, len(self.pending))
