"""The task table of a run store: four growable Zarr arrays, mirrored in memory by the single writer.

Rows are search tasks in the order they were added; row `r` lives in chunk `r // CHUNK_ROWS` of
every array. `tasks/path` int32 [cap, 64] holds the choice path padded with -1; `tasks/info` int64
[cap, 5] holds (fragment, parent row or -1, status 0 pending / 1 done, worker index or -1, epoch or
-1); `tasks/counters` float64 [cap, C] holds a done task's counters; `tasks/rank` int64 [cap, 1] the
row's rank (the driver's order, `TaskRecord.rank`) or -1 where none was given. A table made before
ranks were kept has no rank array and its commit record no `ranked`: its ranks read as unknown and
stay so. The `tasks` group's sealed
attributes are the commit record: the row count `rows`, the `epoch` (how many commits so far), the
counter names, the worker names, `run` (the run tag of the identity the table was made for, see
`records.run_tag`: a table copied from another run's store is damage) and `found`, the number of
found μGraph records per fragment (a second witness beside the ledger: fewer records on disk than
counted is damage, see `cross_checks`).

Why it is cheap: the writer keeps a copy of every array in memory and writes whole chunks from it,
encoded by `chunk_codec` (no read-modify-write, no zarr event-loop round trips); capacity grows a
chunk at a time, so a resize (a `zarr.json` rewrite per array) happens once per CHUNK_ROWS rows.

Why a crash cannot corrupt it: rows past `rows` are not part of the table, whatever the chunks hold.
New rows are written to their chunks first and committed after, so every committed row was
completely written; arrays may differ in capacity after a crash mid-resize, which does not matter.
A status flips to done in the same chunk write that records the task's worker and the epoch of the
commit that made its children and worker name durable, after its counters.

Reading a table back on open, and why a reader beside a live writer sees a consistent table and
damage is detected, is `task_table_load`; it hands the checked rows to `TaskTable.install`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr.api.asynchronous as zasync
from zarr.core.array import AsyncArray
from zarr.core.sync import sync as zarr_sync

from mugraph.storage.run.atomic_store import AtomicLocalStore, write_atomic
from mugraph.storage.run.chunk_codec import compressors, encode_chunk
from mugraph.storage.run.errors import StoreError
from mugraph.storage.run.records import RUN_KEY, write_record
from mugraph.storage.run.task_records import FragmentTasks, TaskRecord, TaskSummary

__all__ = ["CHUNK_ROWS", "MAX_DEPTH", "FragmentTasks", "TaskRecord", "TaskSummary", "TaskTable"]

CHUNK_ROWS = 512
MAX_DEPTH = 64
FILL = -2
FRAGMENT, PARENT, STATUS, WORKER, EPOCH = range(5)
INFO_WIDTH = 5
PENDING, DONE = 0, 1
_INT32_MAX = 2**31 - 1
GROUP = "tasks"

Path_ = tuple[int, ...]
Key = tuple[int, Path_]


@dataclass(frozen=True)
class ArraySpec:
    name: str
    dtype: str
    fill: float

    def width(self, counters: int) -> int:
        return {"path": MAX_DEPTH, "info": INFO_WIDTH, "rank": 1}.get(self.name, counters)


_SPECS = (
    ArraySpec("path", "int32", FILL),
    ArraySpec("info", "int64", FILL),
    ArraySpec("counters", "float64", math.nan),
)
_RANK = ArraySpec("rank", "int64", FILL)
UNRANKED = -1  # a row's rank where none was given


def array_specs(ranked: bool) -> tuple[ArraySpec, ...]:
    return (*_SPECS, _RANK) if ranked else _SPECS


def check_path(path: Sequence[int], what: str) -> Path_:
    """`path` as a tuple of ints in [0, 2**31); ValueError naming `what` otherwise."""
    out = tuple(int(x) for x in path)
    if len(out) > MAX_DEPTH:
        raise ValueError(f"{what}: path {out} is longer than {MAX_DEPTH}")
    if any(x < 0 or x > _INT32_MAX for x in out) or any(isinstance(x, bool) for x in path):
        raise ValueError(f"{what}: path {out} must hold non-negative int32 child indices")
    return out


def grow_rows(a: npt.NDArray[Any], rows: int, fill: float) -> npt.NDArray[Any]:
    """`a` with at least `rows` rows (a multiple of CHUNK_ROWS), new rows filled."""
    if rows <= a.shape[0]:
        return a
    cap = max(a.shape[0] * 2, -(-rows // CHUNK_ROWS) * CHUNK_ROWS)
    out = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def chunk_file(root: Path, arrays: Mapping[str, AsyncArray[Any]], name: str, chunk: int) -> Path:
    """The file of chunk `chunk` of array `name` of the table at `root`."""
    key = str(arrays[name].metadata.encode_chunk_key((chunk, 0)))
    return root / GROUP / name / key


class TaskTable:
    """The task arrays, their in-memory mirrors and the (fragment, path) → row index."""

    def __init__(
        self, store: AtomicLocalStore, root: Path, arrays: dict[str, AsyncArray[Any]], attrs: Mapping[str, Any]
    ) -> None:
        self._store = store
        self._root = root
        self._arrays = arrays
        self.run = str(attrs[RUN_KEY])
        self.counter_names: tuple[str, ...] = tuple(attrs["counter_names"])
        self.workers: list[str] = list(attrs["workers"])
        self._worker_index = {w: i for i, w in enumerate(self.workers)}
        self.rows = 0
        self._flushed = 0  # rows [0, _flushed) are written to their chunks
        self.epoch = int(attrs["epoch"])  # commits so far
        self.found_counts: dict[int, int] = dict(attrs.get("found", {}))  # fragment → found records
        self.ranked = bool(attrs.get("ranked", False))  # False: made before ranks were kept
        self._committed = self._state(0)  # (rows, number of workers, found counts) as last committed
        width = len(self.counter_names)
        self._path = np.full((0, MAX_DEPTH), FILL, dtype=np.int32)
        self._info = np.full((0, INFO_WIDTH), FILL, dtype=np.int64)
        self._counters = np.full((0, width), math.nan, dtype=np.float64)
        self._rank = np.full((0, 1), FILL, dtype=np.int64)
        self._index: dict[Key, int] = {}
        self._pending_worker: dict[int, int] = {}  # row → worker index, staged by stage_completion

    def _state(self, rows: int) -> tuple[int, int, tuple[tuple[int, int], ...]]:
        return rows, len(self.workers), tuple(sorted(self.found_counts.items()))

    # ---------------------------------------------------------------- creation, and rows read back

    @classmethod
    async def create(cls, store: AtomicLocalStore, root: Path, counter_names: Sequence[str], run: str) -> TaskTable:
        names = [str(n) for n in counter_names]
        if len(set(names)) != len(names):
            raise ValueError(f"counter names must be distinct, got {names}")
        attrs = {
            "rows": 0,
            "epoch": 0,
            "counter_names": names,
            "workers": [],
            "found": {},
            "ranked": True,
            RUN_KEY: run,
        }
        write_record(store, GROUP, attrs)
        arrays: dict[str, AsyncArray[Any]] = {}
        for spec in array_specs(True):
            w = spec.width(len(names))
            arrays[spec.name] = await zasync.create_array(
                store=store,
                name=f"{GROUP}/{spec.name}",
                shape=(0, w),
                chunks=(CHUNK_ROWS, max(w, 1)),
                dtype=spec.dtype,
                fill_value=spec.fill,
                compressors=compressors(),
                config={"write_empty_chunks": True},
            )
        return cls(store, root, arrays, attrs)

    def install(
        self,
        rows: int,
        path: npt.NDArray[Any],
        info: npt.NDArray[Any],
        counters: npt.NDArray[Any],
        rank: npt.NDArray[Any] | None,
        index: dict[Key, int],
    ) -> None:
        """Take rows [0, rows) read from disk, checked and indexed by `task_table_load`, as committed
        and written: the mirrors and the (fragment, path) → row index."""
        self.rows = self._flushed = rows
        self._committed = self._state(rows)
        self._path = grow_rows(self._path, rows, FILL)
        self._info = grow_rows(self._info, rows, FILL)
        self._counters = grow_rows(self._counters, rows, math.nan)
        self._path[:rows], self._info[:rows], self._counters[:rows] = path, info, counters
        if rank is not None:
            self._rank = grow_rows(self._rank, rows, FILL)
            self._rank[:rows] = rank
        self._index = index

    # ---------------------------------------------------------------- queries

    def lookup(self, fragment: int, path: Path_) -> int | None:
        return self._index.get((fragment, path))

    def check_row(self, row: int) -> None:
        if not 0 <= row < self.rows:
            raise ValueError(f"task row {row} does not exist (the table has {self.rows} rows)")

    def fragment_of(self, row: int) -> int:
        return int(self._info[row, FRAGMENT])

    def is_done(self, row: int) -> bool:
        return bool(self._info[row, STATUS] == DONE)

    def record(self, row: int) -> TaskRecord:
        frag, parent, status, worker = (int(x) for x in self._info[row, :EPOCH])
        p = self._path[row]
        done = status == DONE
        return TaskRecord(
            row=row,
            fragment=frag,
            path=tuple(int(x) for x in p[p >= 0]),
            parent=parent,
            done=done,
            counters=dict(zip(self.counter_names, self._counters[row].tolist(), strict=True)) if done else {},
            worker=self.workers[worker] if done else "",
            rank=int(self._rank[row, 0]) if self.ranked and self._rank[row, 0] >= 0 else None,
        )

    def records(self, pending_only: bool = False) -> list[TaskRecord]:
        if pending_only:
            return [self.record(r) for r in np.flatnonzero(self._info[: self.rows, STATUS] != DONE).tolist()]
        return [self.record(r) for r in range(self.rows)]

    def summary(self) -> TaskSummary:
        """Counts of done and pending tasks, overall and per fragment; counter sums over done tasks."""
        info = self._info[: self.rows]
        done = info[:, STATUS] == DONE
        frags: dict[int, FragmentTasks] = {}
        for f in np.unique(info[:, FRAGMENT]).tolist():
            in_f = info[:, FRAGMENT] == f
            frags[int(f)] = {"done": int((in_f & done).sum()), "pending": int((in_f & ~done).sum())}
        sums = self._counters[: self.rows][done].sum(axis=0).tolist() if self.counter_names else []
        per_worker = np.bincount(info[done, WORKER], minlength=len(self.workers)).tolist() if self.workers else []
        return {
            "tasks": self.rows,
            "done": int(done.sum()),
            "pending": int((~done).sum()),
            "fragments": frags,
            "counters": dict(zip(self.counter_names, sums, strict=True)),
            "workers": dict(zip(self.workers, per_worker, strict=True)),
        }

    # ---------------------------------------------------------------- writing (the caller orders the phases)

    def stage(self, items: Sequence[tuple[int, Path_, int]], ranks: Sequence[int] | None = None) -> list[int]:
        """Append the (fragment, path, parent) items not present yet to the mirrors, with their
        `ranks` (checked by the caller; None: unranked) where the table keeps ranks; every item's row.
        An item already present keeps its row and its rank.

        All items are checked before any is staged, so a bad item leaves the table as it was."""
        rows = self.rows
        planned: dict[Key, tuple[int, int, int]] = {}  # key → (row, parent, rank)
        fragment_of: dict[int, int] = {}
        for k, (fragment, path, parent) in enumerate(items):
            if fragment < 0:
                raise ValueError(f"fragment index {fragment} is negative")
            key = (fragment, path)
            if key in self._index or key in planned:
                continue
            if not -1 <= parent < rows:
                raise ValueError(f"parent row {parent} does not exist (the table has {rows} rows)")
            parent_fragment = fragment_of.get(parent, self.fragment_of(parent) if 0 <= parent < self.rows else fragment)
            if parent >= 0 and parent_fragment != fragment:
                raise ValueError(f"parent row {parent} belongs to fragment {parent_fragment}, not {fragment}")
            planned[key] = (rows, parent, UNRANKED if ranks is None else ranks[k])
            fragment_of[rows] = fragment
            rows += 1
        if rows > self.rows:
            self._path = grow_rows(self._path, rows, FILL)
            self._info = grow_rows(self._info, rows, FILL)
            self._counters = grow_rows(self._counters, rows, math.nan)
            self._rank = grow_rows(self._rank, rows, FILL)
        for (fragment, path), (row, parent, rank) in planned.items():
            self._path[row] = -1
            self._path[row, : len(path)] = path
            self._info[row] = (fragment, parent, PENDING, -1, -1)
            self._rank[row] = rank
            self._index[(fragment, path)] = row
        self.rows = rows
        return [self._index[(fragment, path)] for fragment, path, _ in items]

    def flush(self) -> None:
        """Write the path and info chunks of the staged rows (not committed until `commit`)."""
        rows = self.rows
        if self._flushed >= rows:
            return
        names = ("path", "info", "rank") if self.ranked else ("path", "info")
        self._write(names, range(self._flushed // CHUNK_ROWS, -(-rows // CHUNK_ROWS)))
        self._flushed = rows

    def counter_values(self, counters: Mapping[str, float], row: int) -> list[float]:
        """The counters in column order (missing ones 0); ValueError for unknown names or NaN."""
        unknown = sorted(set(counters) - set(self.counter_names))
        if unknown:
            raise ValueError(f"unknown counters {unknown}; this store records {list(self.counter_names)}")
        values = [float(counters.get(n, 0.0)) for n in self.counter_names]
        if any(math.isnan(v) for v in values):
            raise ValueError(f"counters of task row {row} contain NaN: {dict(counters)}")
        return values

    def stage_completion(self, row: int, values: Sequence[float], worker: str) -> None:
        """Put a task's counters and worker into the mirrors (its status is left pending)."""
        if worker not in self._worker_index:
            self._worker_index[worker] = len(self.workers)
            self.workers.append(worker)
        self._counters[row] = values
        self._pending_worker[row] = self._worker_index[worker]

    def commit(self) -> None:
        """Write the row count, worker names and found counts, if they changed: this makes flushed rows
        part of the table."""
        state = self._state(self._flushed)
        if state == self._committed:
            return
        attrs = {
            "rows": self._flushed,
            "epoch": self.epoch + 1,
            "counter_names": list(self.counter_names),
            "workers": list(self.workers),
            "found": {str(f): n for f, n in sorted(self.found_counts.items())},
            **({"ranked": True} if self.ranked else {}),
            RUN_KEY: self.run,
        }
        write_record(self._store, GROUP, attrs)
        self._committed = state
        self.epoch += 1

    def write_counters(self, rows: Sequence[int]) -> None:
        """Write the counter chunks holding `rows` (each chunk once, however many rows it holds)."""
        if self.counter_names and rows:
            self._write(("counters",), sorted({r // CHUNK_ROWS for r in rows}))

    def mark_done(self, rows: Sequence[int]) -> None:
        """Flip the rows' status to done with their worker index and the current epoch, one write per chunk."""
        missing = [r for r in rows if r not in self._pending_worker]
        if missing:
            raise StoreError(f"internal: completion of row {missing[0]} was not staged")
        for r in rows:
            self._info[r, STATUS:] = (DONE, self._pending_worker.pop(r), self.epoch)
        if rows:
            self._write(("info",), sorted({r // CHUNK_ROWS for r in rows}))

    def mark_pending(self, rows: Sequence[int]) -> None:
        """Set done rows back to pending (status, worker and epoch, one write per chunk), as a crash
        before their done mark would have left them: `repair` has their tasks run again to find the
        μGraphs whose records it dropped. Their counters stay until the rerun replaces them."""
        for r in rows:
            self._info[r, STATUS:] = (PENDING, -1, -1)
        if rows:
            self._write(("info",), sorted({r // CHUNK_ROWS for r in rows}))

    def _write(self, names: Sequence[str], chunks: Sequence[int]) -> None:
        """Write whole chunks from the mirrors (one atomic file each), growing every array first if needed."""
        need = (max(chunks) + 1) * CHUNK_ROWS
        grow = [a for a in self._arrays.values() if a.shape[0] < need]
        if grow:

            async def resize() -> None:
                await asyncio.gather(*(a.resize((need, a.shape[1])) for a in grow))

            zarr_sync(resize())
        mirrors: dict[str, npt.NDArray[Any]] = {
            "path": self._path,
            "info": self._info,
            "counters": self._counters,
            "rank": self._rank,
        }
        for name in names:
            for c in chunks:
                block = mirrors[name][c * CHUNK_ROWS : (c + 1) * CHUNK_ROWS]
                write_atomic(
                    chunk_file(self._root, self._arrays, name, c), encode_chunk(block), durable=self._store.durable
                )
