"""A run store held in memory: a second backend of `RunStoreWriter`, for tests only.

It keeps what the Zarr store keeps, with the same rules at the seam (what an open refuses, what a
write checks, what a found μGraph keeps when found again), and nothing of its disk format: no
checksums, no ledger, no crash ordering, since nothing here survives the process. Its purpose is
to show that the contract suite (tests/helpers/run_contract.py) states the protocol, not the Zarr
store's accidents, and to give unit tests of the pipeline's readers a store without a disk.

`MemoryRunStores` plays the disk: stores are named by path, a second `open` of a path finds what
the first left (a resumed run), and one writer at a time holds a path.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from mugraph.ir.canonical import replaces_find
from mugraph.ir.names import check_label
from mugraph.storage.run.errors import StoreBusy, StoreError, StoreMismatch
from mugraph.storage.run.run_records import (
    ConfirmationRecord,
    ExpertRecord,
    FinalRecord,
    FragmentRecord,
    JsonObject,
    LayoutRecord,
    MeasurementRecord,
    ProgressSample,
)
from mugraph.storage.run.task_records import (
    FoundRecord,
    FragmentTasks,
    TaskCompletion,
    TaskRecord,
    TaskSummary,
    check_find_time,
    check_ranks,
    first_found,
)
from mugraph.storage.run.task_table import MAX_DEPTH, check_path

__all__ = ["MemoryRunStore", "MemoryRunStores"]

_KINDS = ("confirmations", "layouts", "measurements")


@dataclass
class _Row:
    fragment: int
    path: tuple[int, ...]
    parent: int
    done: bool = False
    counters: list[float] = field(default_factory=list)
    worker: str = ""
    rank: int | None = None


@dataclass
class _State:
    identity: dict[str, str]
    meta: JsonObject
    counter_names: list[str]
    fragments: list[FragmentRecord] | None = None
    rows: list[_Row] = field(default_factory=list)
    index: dict[tuple[int, tuple[int, ...]], int] = field(default_factory=dict)
    found: dict[int, dict[str, FoundRecord]] = field(default_factory=dict)
    keyed: dict[tuple[str, int], dict[str, JsonObject]] = field(default_factory=dict)
    rankings: dict[int, list[JsonObject]] = field(default_factory=dict)
    timeline: dict[int, list[ProgressSample]] = field(default_factory=dict)
    final: FinalRecord | None = None
    experts: list[ExpertRecord] | None = None
    writer: bool = False


def _json(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from None


class MemoryRunStores:
    """The stores of one test, by path (the memory backend's disk)."""

    def __init__(self) -> None:
        self._states: dict[Path, _State] = {}

    def open(
        self,
        path: Path,
        identity: Mapping[str, str],
        *,
        meta: Mapping[str, Any] | None = None,
        counter_names: Sequence[str] = (),
        fresh: bool = False,
    ) -> MemoryRunStore:
        ident = {str(k): v for k, v in identity.items()}
        bad = [k for k, v in ident.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"identity values must be str; not for {bad}")
        names = [str(n) for n in counter_names]
        state = self._states.get(path)
        if state is not None and state.writer:
            raise StoreBusy(f"run store {path} is in use by another writer")
        if fresh or state is None:
            state = _State(ident, _json(dict(meta or {}), "meta"), names)
            self._states[path] = state
            created = True
        else:
            created = False
            if state.identity != ident:
                raise StoreMismatch(f"run store {path} was made for another run")
            if names and names != state.counter_names:
                raise StoreMismatch(f"run store {path} was made for another run (counter_names)")
        state.writer = True
        return MemoryRunStore(path, state, readonly=False, created=created)

    def open_existing(self, path: Path, *, readonly: bool = True) -> MemoryRunStore:
        state = self._states.get(path)
        if state is None:
            raise StoreError(f"no run store at {path}")
        if not readonly:
            if state.writer:
                raise StoreBusy(f"run store {path} is in use by another writer")
            state.writer = True
            return MemoryRunStore(path, state, readonly=False, created=False)
        reader = MemoryRunStore(path, copy.deepcopy(state), readonly=True, created=False)
        reader.live = state  # for `writer`, which asks about now
        return reader


class MemoryRunStore:
    """One open handle onto a store of `MemoryRunStores` (a reader's holds a copy taken at open)."""

    def __init__(self, path: Path, state: _State, *, readonly: bool, created: bool) -> None:
        self.path = path
        self.identity = dict(state.identity)
        self.meta = copy.deepcopy(state.meta)
        self.created = created
        self.readonly = readonly
        self._s = state
        self.live = state  # the shared state (a reader's `_s` is a copy taken at open)
        self._closed = False

    def writer(self) -> int | None:
        return os.getpid() if self.live.writer else None

    def close(self) -> None:
        if not self._closed and not self.readonly:
            self._s.writer = False
        self._closed = True

    def __enter__(self) -> MemoryRunStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---------------------------------------------------------------- checks

    def _writable(self) -> None:
        if self._closed:
            raise StoreError(f"run store {self.path} is closed")
        if self.readonly:
            raise StoreError(f"run store {self.path} is open read-only")

    def _fragment(self, fragment: int) -> int:
        if isinstance(fragment, bool) or not isinstance(fragment, int) or fragment < 0:
            raise ValueError(f"fragment index must be a non-negative int, got {fragment!r}")
        frags = self._s.fragments
        if frags is not None and fragment >= len(frags):
            raise ValueError(f"fragment {fragment} does not exist (the store has {len(frags)} fragments)")
        return fragment

    @staticmethod
    def _digest(digest: str) -> str:
        ok = isinstance(digest, str) and 0 < len(digest) <= 128 and digest[0].isalnum()
        if not ok or not all(c.isascii() and (c.isalnum() or c in "_.-") for c in digest):
            raise ValueError(f"digest {digest!r} is not a plain name ([0-9A-Za-z_.-], at most 128 characters)")
        return digest

    def _row(self, row: int) -> _Row:
        if not 0 <= row < len(self._s.rows):
            raise ValueError(f"task row {row} does not exist (the table has {len(self._s.rows)} rows)")
        return self._s.rows[row]

    # ---------------------------------------------------------------- fragments and tasks

    def set_fragments(self, fragments: Sequence[FragmentRecord]) -> None:
        self._writable()
        value = _json([dict(f) for f in fragments], "fragments")
        if self._s.fragments is not None:
            if value != self._s.fragments:
                raise StoreMismatch(f"run store {self.path} holds other fragments than these")
            return
        used = [r.fragment for r in self._s.rows]
        if used and max(used) >= len(value):
            raise ValueError(f"tasks refer to fragment {max(used)} but only {len(value)} fragments are given")
        self._s.fragments = value

    def fragments(self) -> list[FragmentRecord]:
        return copy.deepcopy(self._s.fragments) if self._s.fragments is not None else []

    def _stage(
        self, items: Sequence[tuple[int, tuple[int, ...], int]], rows: list[_Row], ranks: Sequence[int] | None = None
    ) -> list[int]:
        """Rows for (fragment, path, parent) items, appending new ones (with their ranks) to `rows`
        (a copy of the table)."""
        index = dict(self._s.index)
        for k, (fragment, path, parent) in enumerate(items):
            if (fragment, path) in index:
                continue
            if not -1 <= parent < len(rows):
                raise ValueError(f"parent row {parent} does not exist (the table has {len(rows)} rows)")
            if parent >= 0 and rows[parent].fragment != fragment:
                raise ValueError(f"parent row {parent} belongs to fragment {rows[parent].fragment}, not {fragment}")
            index[(fragment, path)] = len(rows)
            rows.append(_Row(fragment, path, parent, rank=None if ranks is None else ranks[k]))
        return [index[(f, p)] for f, p, _ in items]

    def _commit_rows(self, rows: list[_Row]) -> None:
        for r in range(len(self._s.rows), len(rows)):
            self._s.index[(rows[r].fragment, rows[r].path)] = r
        self._s.rows = rows

    def add_tasks(self, items: Sequence[tuple[int, tuple[int, ...], int]]) -> list[int]:
        self._writable()
        checked = [(self._fragment(f), check_path(p, "add_tasks"), int(parent)) for f, p, parent in items]
        rows = list(self._s.rows)
        out = self._stage(checked, rows)
        self._commit_rows(rows)
        return out

    def _counters(self, counters: Mapping[str, float], row: int) -> list[float]:
        names = self._s.counter_names
        unknown = sorted(set(counters) - set(names))
        if unknown:
            raise ValueError(f"unknown counters {unknown}; this store records {names}")
        values = [float(counters.get(n, 0.0)) for n in names]
        if any(math.isnan(v) for v in values):
            raise ValueError(f"counters of task row {row} contain NaN: {dict(counters)}")
        return values

    def complete_tasks(self, items: Sequence[TaskCompletion]) -> list[list[int]]:
        self._writable()
        rows = [copy.copy(r) for r in self._s.rows]
        best: dict[tuple[int, str], FoundRecord] = {}
        staged: list[tuple[int, list[tuple[int, tuple[int, ...], int]], list[float], str]] = []
        ranks: list[list[int] | None] = []
        for item in items:
            fragment = self._row(item.row).fragment
            for rec in item.found:
                if rec.fragment != fragment:
                    raise ValueError(f"found μGraph {rec.digest} is for fragment {rec.fragment}, not {fragment}")
                if not isinstance(rec.graph, str):
                    raise ValueError(f"found μGraph {rec.digest}: graph must be JSON text")
                digest = self._digest(rec.digest)
                check_find_time(rec.seconds, rec.states, f"found μGraph {digest}")
                path = check_path(rec.path, f"found {digest}")
                cand = FoundRecord(fragment, digest, path, rec.graph, item.row, rec.seconds, rec.states)
                have = best.get((fragment, digest))
                if replaces_find(cand.path, None if have is None else have.path):
                    best[(fragment, digest)] = cand if have is None else first_found(cand, have)
            kids = [(fragment, check_path(p, f"child of row {item.row}"), item.row) for p in item.children]
            ranks.append(check_ranks(item.ranks, len(kids), f"children of row {item.row}"))
            staged.append((item.row, kids, self._counters(item.counters, item.row), str(item.worker)))
        out = [self._stage(kids, rows, r) for (_, kids, _, _), r in zip(staged, ranks, strict=True)]
        for (row, _, values, worker), item in zip(staged, items, strict=True):
            if item.done and not rows[row].done:
                rows[row].done, rows[row].counters, rows[row].worker = True, values, worker
        for (f, d), rec in best.items():
            kept = self._s.found.setdefault(f, {}).get(d)
            if replaces_find(rec.path, None if kept is None else kept.path):
                self._s.found[f][d] = rec if kept is None else first_found(rec, kept)
        self._commit_rows(rows)
        return out

    def _task(self, row: int) -> TaskRecord:
        r = self._s.rows[row]
        counters = dict(zip(self._s.counter_names, r.counters, strict=True)) if r.done else {}
        return TaskRecord(row, r.fragment, r.path, r.parent, r.done, counters, r.worker if r.done else "", r.rank)

    def tasks(self) -> list[TaskRecord]:
        return [self._task(r) for r in range(len(self._s.rows))]

    def pending(self) -> list[TaskRecord]:
        return [self._task(r) for r, row in enumerate(self._s.rows) if not row.done]

    def task_summary(self) -> TaskSummary:
        frags: dict[int, FragmentTasks] = {}
        sums = [0.0] * len(self._s.counter_names)
        workers: dict[str, int] = {}
        for r in self._s.rows:
            per = frags.setdefault(r.fragment, {"done": 0, "pending": 0})
            per["done" if r.done else "pending"] += 1
            if r.done:
                sums = [a + b for a, b in zip(sums, r.counters, strict=True)]
                workers[r.worker] = workers.get(r.worker, 0) + 1
        done = sum(r.done for r in self._s.rows)
        return {
            "tasks": len(self._s.rows),
            "done": done,
            "pending": len(self._s.rows) - done,
            "fragments": dict(sorted(frags.items())),
            "counters": dict(zip(self._s.counter_names, sums, strict=True)),
            "workers": workers,
        }

    # ---------------------------------------------------------------- records of μGraphs and of the run

    def found(self, fragment: int) -> dict[str, FoundRecord]:
        return dict(sorted(self._s.found.get(self._fragment(fragment), {}).items()))

    def _put(self, kind: str, fragment: int, digest: str, result: Mapping[str, Any]) -> None:
        self._writable()
        key = (kind, self._fragment(fragment))
        self._s.keyed.setdefault(key, {})[self._digest(digest)] = _json(dict(result), kind[:-1])

    def _get(self, kind: str, fragment: int) -> dict[str, Any]:
        return copy.deepcopy(dict(sorted(self._s.keyed.get((kind, self._fragment(fragment)), {}).items())))

    def put_confirmation(self, fragment: int, digest: str, result: ConfirmationRecord) -> None:
        self._put("confirmations", fragment, digest, result)

    def confirmations(self, fragment: int) -> dict[str, ConfirmationRecord]:
        return self._get("confirmations", fragment)

    def put_layout(self, fragment: int, digest: str, layout: LayoutRecord) -> None:
        self._put("layouts", fragment, digest, layout)

    def layouts(self, fragment: int) -> dict[str, LayoutRecord]:
        return self._get("layouts", fragment)

    def put_measurement(self, fragment: int, digest: str, measurement: MeasurementRecord) -> None:
        self._put("measurements", fragment, digest, measurement)

    def measurements(self, fragment: int) -> dict[str, MeasurementRecord]:
        return self._get("measurements", fragment)

    def put_ranking(self, fragment: int, ranking: Sequence[Mapping[str, Any]]) -> None:
        self._writable()
        value = _json([dict(r) for r in ranking], "ranking")
        self._s.rankings[self._fragment(fragment)] = value

    def ranking(self, fragment: int) -> list[JsonObject] | None:
        return copy.deepcopy(self._s.rankings.get(self._fragment(fragment)))

    def put_timeline(self, invocation: int, samples: Sequence[Mapping[str, Any]]) -> None:
        self._writable()
        if not isinstance(invocation, int) or isinstance(invocation, bool) or not 0 <= invocation < 10**6:
            raise ValueError(f"invocation {invocation!r} must be an int in [0, 10**6)")
        self._s.timeline[invocation] = _json([dict(x) for x in samples], "timeline")

    def timeline(self) -> list[list[ProgressSample]]:
        return [copy.deepcopy(self._s.timeline[i]) for i in sorted(self._s.timeline)]

    def put_final(self, final: Mapping[str, Any]) -> None:
        self._writable()
        self._s.final = cast(FinalRecord, _json(dict(final), "final result"))

    def final(self) -> FinalRecord | None:
        return copy.deepcopy(self._s.final)

    def put_experts(self, experts: Sequence[ExpertRecord]) -> None:
        self._writable()
        value = cast(list[ExpertRecord], _json([dict(e) for e in experts], "experts"))
        for e in value:
            check_label(e.get("label"), "expert")
            self._digest(e.get("digest"))
        self._s.experts = value

    def experts(self) -> list[ExpertRecord] | None:
        return copy.deepcopy(self._s.experts)

    def size_bytes(self) -> int:
        """The length of the state as JSON text (what it would take on a disk, roughly)."""
        s = self._s
        found = {f"{f}/{d}": [r.graph, list(r.path)] for f, recs in s.found.items() for d, r in recs.items()}
        keyed = {f"{k}/{f}": v for (k, f), v in s.keyed.items()}
        state = [
            s.identity,
            s.meta,
            s.fragments,
            len(s.rows) * (MAX_DEPTH + 5),
            found,
            keyed,
            s.rankings,
            s.final,
            s.experts,
        ]
        return len(json.dumps([state, s.timeline], default=str))
