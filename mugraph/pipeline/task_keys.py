"""Search tasks' Dask keys: one per path, or one naming every path of a bundle."""

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
