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
tuples of non-negative int32.
"""

from __future__ import annotations

from collections.abc import Sequence

Path = tuple[int, ...]

SIBLINGS = 1 << 30  # set on a path's last index: that child and its later kept siblings
ROOT_SHARE = 16  # the root's task expands 1/ROOT_SHARE of the node budget


def task_budget(path: Sequence[int], budget: int) -> int:
    """The node budget of the task at `path`. The root's task stops early: until it stops, the
    run has no other task, so every worker but one would wait out a whole budget. Stopping it
    sooner hands its frontier (the root's kept children, one task each) to every worker a
    moment after the start. The split stays a function of the path and `budget` alone."""
    return max(1, budget // ROOT_SHARE) if not path else budget


def sibling_run(parent: Path, first: int) -> Path:
    """The task covering `parent`'s kept children from index `first` on."""
    if not 0 <= first < SIBLINGS:
        raise ValueError(f"child index {first} is out of range")
    return (*parent, first | SIBLINGS)


def split_run(path: Sequence[int]) -> tuple[Path, int] | None:
    """(parent, first) for a sibling run; None for a path naming one node."""
    if path and path[-1] >= SIBLINGS:
        return tuple(path[:-1]), path[-1] & (SIBLINGS - 1)
    return None


def frontier_tasks(unexplored: Sequence[Path]) -> list[Path]:
    """The unexplored stack entries (next first) as tasks: consecutive siblings become one run,
    except at the shallowest depth, whose siblings stay one task each.

    Each depth's entries are the remaining suffix of one parent's kept children, in index order,
    so a run from the first of them covers exactly them. The shallowest entries are the largest
    subtrees, so they are handed out singly: that keeps enough tasks queued for every worker
    while the many small subtrees deeper down travel together. A lone entry stays a plain path
    (its task then needs no look at the parent's children)."""
    out: list[Path] = []
    top = min(map(len, unexplored), default=0)
    i = 0
    while i < len(unexplored):
        parent = unexplored[i][:-1]
        j = i + 1
        while j < len(unexplored) and unexplored[j][:-1] == parent:
            j += 1
        if j == i + 1 or len(parent) + 1 == top:
            out.extend(unexplored[i:j])
        else:
            out.append(sibling_run(parent, unexplored[i][-1]))
        i = j
    return out


def show(path: Sequence[int]) -> str:
    """A task path as people read it: `[0, 3, 2]`, or `[0, 3, 2…]` for a sibling run."""
    run = split_run(path)
    if run is None:
        return str(list(path))
    parent, first = run
    return "[" + ", ".join(map(str, (*parent, first))) + "…]"
