"""A scale trace made from a real run store, so a run on many real workers (on any machine, stopped by
a time limit or not) can be replayed at any N, where `bench_scale.py record` (serial, one process)
could never run it.

The store holds one row per search task, also for a task that travelled in a bundle (the driver
commits each path of a bundle as its own row, with its own counters and seconds), so the trace has
exactly the store's done rows, one task each:

- frontier: the paths of the rows whose parent is the task, in row order (the order its frontier
  was added); pending ones are the unrun frontier, dropped on replay as in a partial trace;
- found: each stored μGraph goes to the task that explored its path: the deepest task whose path
  is a prefix of it, where a sibling run `(parent, first…)` covers `parent`'s children from `first`
  on and a plain path at the same depth is more specific than a run. (The store keeps one record a
  digest, at its smallest path, so a μGraph found by several tasks appears once, under the task of
  that path; the replay's μGraph set is the same.) A μGraph under a pending task is dropped with it;
- budget: `task_budget(path, run budget)`, as the driver gives it;
- result bytes: the pickled (path, found, frontier, counters), as `record` estimates them.

A fragment whose root task never finished gets an empty, zero-second root task (the replay's driver
submits every fragment's root), counted in the header as `stub_roots`. The header also says where
the trace came from: the store's name, its command line, its `--workers`, the worker names that ran
tasks, whether any task was left (`complete`, `unrun_frontier`), and the real run's wall.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scale_trace import PathT, TraceTask, result_bytes

from mugraph.pipeline.plan import make_plan
from mugraph.programs.registry import get_builtin
from mugraph.stages.search.config import for_reference, preset_config
from mugraph.stages.search.task_paths import split_run, task_budget
from mugraph.storage.run.store import FoundRecord, RunStore, TaskRecord

__all__ = ["Coverage", "store_settings", "trace_from_store"]


class Coverage:
    """Which task explored a node: the tasks of one store, indexed by what their paths cover."""

    def __init__(self, tasks: Sequence[TaskRecord]) -> None:
        self._plain: dict[tuple[int, PathT], TaskRecord] = {}
        self._runs: dict[tuple[int, PathT], list[tuple[int, TaskRecord]]] = {}
        for t in tasks:
            run = split_run(t.path)
            if run is not None:  # runs of one parent are disjoint, so the latest first owns a node
                self._runs.setdefault((t.fragment, run.parent), []).append((run.first, t))
            else:
                self._plain[(t.fragment, t.path)] = t
        for runs in self._runs.values():
            runs.sort(key=lambda r: r[0])

    def owner(self, fragment: int, path: PathT) -> TaskRecord | None:
        """The task that explored the node at `path`: the deepest whose path covers it."""
        for depth in range(len(path), -1, -1):
            plain = self._plain.get((fragment, path[:depth]))
            if plain is not None:
                return plain
            if depth == 0:
                break
            runs = self._runs.get((fragment, path[: depth - 1]), [])
            i = bisect.bisect_right([first for first, _ in runs], path[depth - 1])
            if i:
                return runs[i - 1][1]
        return None


def store_settings(program: str, budget: int, fragments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The `--set` overrides under which `make_plan(program, None, settings, budget)` rebuilds the
    store's fragments digest for digest (the replay builds its plan that way): none, else the config
    fields every fragment has changed alike from its preset. ValueError where neither does."""
    digests = [str(f["digest"]) for f in fragments]
    prog = get_builtin(program)
    plan0 = make_plan(prog, None, {}, budget)
    candidates: list[dict[str, Any]] = [{}]
    stored = [json.loads(str(f["config"])) for f in fragments]
    if len(plan0.fragments) == len(fragments):
        defaults = [
            for_reference(preset_config(str(f["preset"])), {op.kind for op in fp.spec.graph.ops}).to_json()
            for f, fp in zip(fragments, plan0.fragments, strict=True)
        ]
        changed = {k for s, d in zip(stored, defaults, strict=True) for k in s if s[k] != d.get(k)}
        if all(all(s[k] == stored[0][k] for s in stored) for k in changed):
            candidates.append({k: stored[0][k] for k in sorted(changed)})
    for settings in candidates:
        if [fp.payload.digest for fp in make_plan(prog, None, settings, budget).fragments] == digests:
            return settings
    raise ValueError(
        f"the store's fragments of {program} are not make_plan({program!r}, None, settings, {budget}) "
        "for any settings tried (another --preset, or per-fragment settings): the replay could not rebuild them"
    )


def _command_option(command: Sequence[Any], name: str) -> str | None:
    """The value of `name` in the store's recorded command line (`--workers 15` or `--workers=15`)."""
    args = [str(a) for a in command]
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.partition("=")[2]
    return None


def trace_from_store(store: Path) -> tuple[dict[str, Any], list[TraceTask]]:
    """The trace of the done tasks of the run store at `store` (opened read-only)."""
    with RunStore.open_existing(store) as rs:
        identity, meta = rs.identity, rs.meta
        fragments = rs.fragments()
        rows = rs.tasks()
        found = [rs.found(i) for i in range(len(fragments))]
        timeline = [samples[-1] for samples in rs.timeline() if samples]
    program, budget = identity["program"], int(identity["budget"])
    settings = store_settings(program, budget, fragments)
    coverage = Coverage(rows)
    by_row = {t.row: t for t in rows}
    children: dict[int, list[TaskRecord]] = {}
    for t in rows:
        if t.parent >= 0:
            children.setdefault(t.parent, []).append(t)
    mine: dict[int, list[FoundRecord]] = {}
    unrun_found = mismatched = 0
    for per_fragment in found:
        for rec in per_fragment.values():
            owner = coverage.owner(rec.fragment, rec.path)
            if owner is None or not owner.done:
                unrun_found += 1
                continue
            mismatched += by_row.get(rec.task, owner).row != owner.row
            mine.setdefault(owner.row, []).append(rec)
    tasks: list[TraceTask] = []
    digest_of = [str(f["digest"]) for f in fragments]
    for t in rows:
        if not t.done:
            continue
        f = tuple((r.digest, r.path, r.graph) for r in sorted(mine.get(t.row, []), key=lambda r: r.path))
        frontier = tuple(c.path for c in sorted(children.get(t.row, []), key=lambda c: c.row))
        counters = {k: float(v) for k, v in t.counters.items() if not math.isnan(v)}
        size = result_bytes(t.path, f, frontier, counters)
        b = task_budget(t.path, budget)
        tasks.append(
            TraceTask(digest_of[t.fragment], t.path, b, counters.get("seconds", 0.0), f, frontier, counters, size)
        )
    rooted = {t.fragment for t in rows if not t.path and t.done}
    stubs = [i for i in range(len(fragments)) if i not in rooted]
    for i in stubs:
        tasks.insert(0, TraceTask(digest_of[i], (), task_budget((), budget), 0.0, (), (), {}, 0))
    pending = sum(1 for t in rows if not t.done)
    workers = _command_option(meta.get("command") or [], "--workers")
    header = {
        "program": program,
        "budget": budget,
        "settings": settings,
        "complete": pending == 0 and not stubs,
        "time_limit": _float(_command_option(meta.get("command") or [], "--time-limit")),
        "unrun_frontier": pending,
        "record_seconds": None,
        "fragments": digest_of,
        "source": "store",
        "store": Path(store).name,
        "workers": int(workers) if workers and workers.isdigit() else None,
        "worker_names": len({t.worker for t in rows if t.done}),
        "command": [str(a) for a in meta.get("command") or []],
        "found_records": sum(len(x) for x in found),
        "unrun_found": unrun_found,
        "found_owner_mismatch": mismatched,
        "stub_roots": len(stubs),
        # the real run's wall per invocation and its estimated share of the space, as of the last
        # progress sample each invocation wrote (samples are a few seconds apart)
        "run_seconds": [x["seconds"] for x in timeline],
        "estimated_fraction": timeline[-1].get("estimated_fraction") if timeline else None,
    }
    return header, tasks


def _float(text: str | None) -> float | None:
    try:
        return None if text is None else float(text)
    except ValueError:
        return None
