"""Search tasks' Dask keys, and how many frontier paths one search task carries."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from mugraph.pipeline.plan import FragmentPlan


def task_key(plan: FragmentPlan, path: Iterable[int]) -> str:
    text = f"{plan.payload.digest}|{','.join(map(str, path))}"
    return f"search-{plan.spec.name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def bundle_key(plan: FragmentPlan, paths: Sequence[Sequence[int]]) -> str:
    """A search task's Dask key: its path's key, or for a bundle one naming all its paths (a path is in
    one live bundle at a time, so keys of live tasks never collide)."""
    if len(paths) == 1:
        return task_key(plan, paths[0])
    text = f"{plan.payload.digest}|{';'.join(','.join(map(str, p)) for p in paths)}"
    return f"search-{plan.spec.name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


MAX_BUNDLE = 8  # paths one search task carries at most
BUNDLE_SLACK = 4  # bundle only past this many waiting paths per worker thread


def bundle_size(waiting: int, slots: int) -> int:
    """How many paths a search task carries: one while paths are scarce (each idle worker should get
    its own), up to MAX_BUNDLE when paths wait many times over for every worker thread. Fewer, longer
    tasks cost the scheduler and the driver fewer messages; the nodes visited are the same, since
    each path is explored under its own budget whichever task carries it."""
    return max(1, min(MAX_BUNDLE, waiting // (BUNDLE_SLACK * max(1, slots))))
