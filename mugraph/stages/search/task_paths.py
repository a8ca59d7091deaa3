"""What a search task names: one subtree, or a run of sibling subtrees.

A node is named by its choice path from the root. A task explores either the subtree of one node
(its path) or the subtrees of a node's kept children from index `first` on, in order (a *sibling
run*). When a budgeted exploration stops, its depth-first stack holds, at each depth, the kept
siblings it has not reached yet: always a suffix of one parent's kept children. Handing each such
suffix on as one task, rather than each sibling as its own, leaves at most one task per depth, so a
run makes a fraction of the tasks (and of the driver's, the scheduler's and the store's work per
task) while every node is still expanded exactly once.

The worker that takes a run lists and judges the parent's children again. It gets the kept list the
parent's task saw because every verdict is a function of the query alone (z3_encoding), whichever
worker or memo answers it.

A sibling run is encoded in the path itself, as the parent's path followed by `first` with the
`SIBLINGS` bit set, so every layer that stores, keys or orders tasks keeps treating paths as plain
tuples of non-negative int32. A *bounded* run, which stops at child `last`, carries `last` with the
bit set after `first`.

The shallowest siblings are handed out singly while they are few, for every worker to have a task.
A block structure node has one child per closing of each of its rows, thousands near the root, and
most are a state or two: one task each made most of a run's tasks, each spending its time replaying
the path. Past `SPREAD` of them they go as `SPREAD` bounded runs of consecutive siblings.

A frontier task also has a *rank*: the sum, over the steps below the explored path, of each step's
place among its siblings in exploration order (0 for the child the order puts first). The driver adds
it to the rank of the task that left it, so a task's rank counts how far its path strays from the
search order's first choices, and it runs the least-straying paths first (`ranked_frontier`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

Path = tuple[int, ...]

SIBLINGS = 1 << 30  # set on a path's last index: that child and its later kept siblings
ROOT_SHARE = 16  # the root's task expands 1/ROOT_SHARE of the node budget
SPREAD = 32  # the most tasks the shallowest siblings of a frontier become


class Run(NamedTuple):
    """A sibling run: `parent`'s kept children from the child at index `first` on, in the order the
    search explores them (`nodes.Expansion`), up to the child at `last` where bounded."""

    parent: Path
    first: int
    last: int | None = None


def task_budget(path: Sequence[int], budget: int) -> int:
    """The node budget of the task at `path`. The root's task stops early: until it stops, the
    run has no other task, so every worker but one would wait out a whole budget. Stopping it
    sooner hands its frontier (the root's kept children, one task each) to every worker a
    moment after the start. The split stays a function of the path and `budget` alone."""
    return max(1, budget // ROOT_SHARE) if not path else budget


def sibling_run(parent: Path, first: int, last: int | None = None) -> Path:
    """The task covering `parent`'s kept children from index `first` on (up to `last`, if given)."""
    for index in (first,) if last is None else (first, last):
        if not 0 <= index < SIBLINGS:
            raise ValueError(f"child index {index} is out of range")
    if last is None:
        return (*parent, first | SIBLINGS)
    return (*parent, first | SIBLINGS, last | SIBLINGS)


def split_run(path: Sequence[int]) -> Run | None:
    """The run a path names; None for a path naming one node."""
    if not path or path[-1] < SIBLINGS:
        return None
    if len(path) > 1 and path[-2] >= SIBLINGS:
        return Run(tuple(path[:-2]), path[-2] & (SIBLINGS - 1), path[-1] & (SIBLINGS - 1))
    return Run(tuple(path[:-1]), path[-1] & (SIBLINGS - 1))


def ranked_frontier(unexplored: Sequence[Path], ranks: Sequence[int]) -> tuple[list[Path], list[int]]:
    """The unexplored stack entries (next first) as tasks, each with its rank: that of its first
    entry (`ranks`, one per entry; a run's later entries come later in exploration order, so they
    rank no lower). Consecutive siblings become one run, except at the shallowest depth, whose
    siblings stay one task each, or become `SPREAD` bounded runs where there are more.

    Each depth's entries are the remaining suffix of one parent's kept children, in exploration order,
    so a run from the first of them covers exactly them. The shallowest entries are the largest
    subtrees, so they are handed out singly: that keeps enough tasks queued for every worker
    while the many small subtrees deeper down travel together. A lone entry stays a plain path
    (its task then needs no look at the parent's children)."""
    groups = _frontier_groups(unexplored)
    return [task for task, _ in groups], [ranks[i] for _, i in groups]


def _frontier_groups(unexplored: Sequence[Path]) -> list[tuple[Path, int]]:
    """Each frontier task (`ranked_frontier`) with the index of its first entry in `unexplored`."""
    out: list[tuple[Path, int]] = []
    top = min(map(len, unexplored), default=0)
    i = 0
    while i < len(unexplored):
        parent = unexplored[i][:-1]
        j = i + 1
        while j < len(unexplored) and unexplored[j][:-1] == parent:
            j += 1
        if j == i + 1 or (len(parent) + 1 == top and j - i <= SPREAD):
            out.extend((unexplored[k], k) for k in range(i, j))
        elif len(parent) + 1 == top:
            out.extend((task, i + at) for task, at in _spread(unexplored[i:j]))
        else:
            out.append((sibling_run(parent, unexplored[i][-1]), i))
        i = j
    return out


def _spread(siblings: Sequence[Path]) -> list[tuple[Path, int]]:
    """Consecutive siblings (more than `SPREAD`) as `SPREAD` bounded runs of near-equal length, each
    with the index of its first sibling."""
    n, out = len(siblings), []
    for k in range(SPREAD):
        start = k * n // SPREAD
        chunk = siblings[start : (k + 1) * n // SPREAD]
        first, last = chunk[0], chunk[-1]
        out.append((first if len(chunk) == 1 else sibling_run(first[:-1], first[-1], last[-1]), start))
    return out


def show(path: Sequence[int]) -> str:
    """A task path as people read it: `[0, 3, 2]`, `[0, 3, 2…]` for a sibling run, `[0, 3, 2…9]`
    for a bounded one."""
    run = split_run(path)
    if run is None:
        return str(list(path))
    end = "" if run.last is None else str(run.last)
    return "[" + ", ".join(map(str, (*run.parent, run.first))) + f"…{end}]"
