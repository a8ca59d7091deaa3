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

Why a reader beside a live writer sees a consistent table: it reads the commit record first and the
chunks after, so it may see a task done whose children were committed after its snapshot of `rows`.
The epoch tells: a reader takes a task as done only if its epoch is within its snapshot, and as
pending otherwise (the state it had at the snapshot). For the lock holder such a row is damage.

Why damage is detected: the fill value (-2, NaN) is impossible in a written row: paths hold -1 or
child indices, info holds -1 or more, a done task's counters are never NaN. Zarr returns the fill
value for a missing chunk without complaint, so the file of every chunk that must exist is checked
too; chunk contents carry a crc32c.
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
from mugraph.storage.run.chunk_codec import CODEC_DICTS, compressors, encode_chunk
from mugraph.storage.run.errors import StoreError, damaged
from mugraph.storage.run.records import RUN_KEY, check_run_tag, metadata_file, read_record, write_record
from mugraph.storage.run.task_records import FragmentTasks, TaskRecord, TaskSummary

__all__ = ["CHUNK_ROWS", "MAX_DEPTH", "FragmentTasks", "TaskRecord", "TaskSummary", "TaskTable"]

CHUNK_ROWS = 512
MAX_DEPTH = 64
FILL = -2
FRAGMENT, PARENT, STATUS, WORKER, EPOCH = range(5)
INFO_WIDTH = 5
PENDING, DONE = 0, 1
_INT32_MAX = 2**31 - 1
_GROUP = "tasks"

Path_ = tuple[int, ...]
Key = tuple[int, Path_]


@dataclass(frozen=True)
class _Spec:
    name: str
    dtype: str
    fill: float

    def width(self, counters: int) -> int:
        return {"path": MAX_DEPTH, "info": INFO_WIDTH, "rank": 1}.get(self.name, counters)


_SPECS = (_Spec("path", "int32", FILL), _Spec("info", "int64", FILL), _Spec("counters", "float64", math.nan))
_RANK = _Spec("rank", "int64", FILL)
UNRANKED = -1  # a row's rank where none was given


def _specs(ranked: bool) -> tuple[_Spec, ...]:
    return (*_SPECS, _RANK) if ranked else _SPECS


def check_path(path: Sequence[int], what: str) -> Path_:
    """`path` as a tuple of ints in [0, 2**31); ValueError naming `what` otherwise."""
    out = tuple(int(x) for x in path)
    if len(out) > MAX_DEPTH:
        raise ValueError(f"{what}: path {out} is longer than {MAX_DEPTH}")
    if any(x < 0 or x > _INT32_MAX for x in out) or any(isinstance(x, bool) for x in path):
        raise ValueError(f"{what}: path {out} must hold non-negative int32 child indices")
    return out


def _found_counts(value: Any) -> dict[int, int]:
    """The commit record's `found` ({"fragment": count}) as ints; ValueError if it is anything else."""
    if not isinstance(value, dict):
        raise ValueError(f"found counts {value!r:.60} are not a mapping")
    out: dict[int, int] = {}
    for key, n in value.items():
        if not (isinstance(key, str) and key.isdigit()) or type(n) is not int or n < 0:
            raise ValueError(f"found count {key!r}: {n!r} is not a fragment's record count")
        out[int(key)] = n
    return out


def _grow(a: npt.NDArray[Any], rows: int, fill: float) -> npt.NDArray[Any]:
    """`a` with at least `rows` rows (a multiple of CHUNK_ROWS), new rows filled."""
    if rows <= a.shape[0]:
        return a
    cap = max(a.shape[0] * 2, -(-rows // CHUNK_ROWS) * CHUNK_ROWS)
    out = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


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

    # ---------------------------------------------------------------- creation and loading

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
        write_record(store, _GROUP, attrs)
        arrays: dict[str, AsyncArray[Any]] = {}
        for spec in _specs(True):
            w = spec.width(len(names))
            arrays[spec.name] = await zasync.create_array(
                store=store,
                name=f"{_GROUP}/{spec.name}",
                shape=(0, w),
                chunks=(CHUNK_ROWS, max(w, 1)),
                dtype=spec.dtype,
                fill_value=spec.fill,
                compressors=compressors(),
                config={"write_empty_chunks": True},
            )
        return cls(store, root, arrays, attrs)

    @classmethod
    async def load(
        cls, store: AtomicLocalStore, root: Path, fragments: int | None, exclusive: bool, run: str
    ) -> TaskTable:
        """Read and check the committed rows of the table made for the run tagged `run`; StoreDamaged
        naming the file at the first problem.

        The commit record first, then info, then the rest: what a done row needs was written before
        it. Not `exclusive` (no lock: a writer may be running), tasks done after the commit record's
        epoch are taken as pending."""
        attrs = await read_record(store, root, _GROUP)
        file = metadata_file(root, _GROUP)
        if attrs is None:
            raise damaged(file, "missing")
        check_run_tag(attrs, run, file)
        try:
            rows, epoch = int(attrs["rows"]), int(attrs["epoch"])
            names = [str(n) for n in attrs["counter_names"]]
            workers = [str(w) for w in attrs["workers"]]
            if rows < 0 or epoch < 0:
                raise ValueError(f"negative row count {rows} or epoch {epoch}")
            found = _found_counts(attrs.get("found", {}))  # absent in stores made before it was kept
            ranked = attrs.get("ranked", False)  # absent likewise
            if not isinstance(ranked, bool):
                raise ValueError(f"ranked {ranked!r:.40} is not true or false")
        except (KeyError, TypeError, ValueError) as exc:
            raise damaged(file, exc) from None
        arrays = {s.name: await cls._open_array(store, root, s, len(names), rows) for s in _specs(ranked)}
        kept = {
            "counter_names": names,
            "workers": workers,
            "epoch": epoch,
            "found": found,
            "ranked": ranked,
            RUN_KEY: run,
        }
        table = cls(store, root, arrays, kept)
        info = await table._read("info", rows, range(-(-rows // CHUNK_ROWS)))
        if not exclusive:
            later = (info[:, STATUS] == DONE) & (info[:, EPOCH] > epoch)
            info[later, STATUS:] = (PENDING, -1, -1)
        done_chunks = sorted({int(r) // CHUNK_ROWS for r in np.flatnonzero(info[:, STATUS] == DONE)})
        counters = await table._read("counters", rows, done_chunks if names else [])
        path = await table._read("path", rows, range(-(-rows // CHUNK_ROWS)))
        rank = await table._read("rank", rows, range(-(-rows // CHUNK_ROWS))) if ranked else None
        table._adopt(rows, path, info, counters, rank, fragments)
        return table

    @staticmethod
    async def _open_array(
        store: AtomicLocalStore, root: Path, spec: _Spec, counters: int, rows: int
    ) -> AsyncArray[Any]:
        name = f"{_GROUP}/{spec.name}"
        file = metadata_file(root, name)
        if not file.is_file():
            raise damaged(file, "missing")
        try:
            arr = await zasync.open_array(store=store, path=name, mode="r" if store.read_only else "r+")
        except Exception as exc:
            raise damaged(file, exc) from None
        w = spec.width(counters)
        codecs = [c.to_dict() for c in getattr(arr.metadata, "codecs", ())]
        fill = float(arr.metadata.fill_value)
        problems = [
            f"dtype {arr.dtype} is not {spec.dtype}" if arr.dtype != np.dtype(spec.dtype) else "",
            f"shape {arr.shape} is not [n, {w}]" if len(arr.shape) != 2 or arr.shape[1] != w else "",
            f"chunks {arr.chunks} are not ({CHUNK_ROWS}, {max(w, 1)})" if arr.chunks != (CHUNK_ROWS, max(w, 1)) else "",
            f"capacity {arr.shape[0]} is not a multiple of {CHUNK_ROWS}" if arr.shape[0] % CHUNK_ROWS else "",
            f"capacity {arr.shape[0]} is below the {rows} committed rows" if arr.shape[0] < rows else "",
            f"codecs {codecs} are not {CODEC_DICTS}" if codecs != CODEC_DICTS else "",
            f"fill value {fill}" if not (fill == spec.fill or (math.isnan(spec.fill) and math.isnan(fill))) else "",
        ]
        bad = [p for p in problems if p]
        if bad:
            raise damaged(file, "; ".join(bad))
        return arr

    def _chunk_file(self, name: str, chunk: int) -> Path:
        key = str(self._arrays[name].metadata.encode_chunk_key((chunk, 0)))
        return self._root / _GROUP / name / key

    async def _read(self, name: str, rows: int, chunks: Sequence[int]) -> npt.NDArray[Any]:
        """Rows [0, rows) of array `name`; the given chunks must exist on disk."""
        arr = self._arrays[name]
        for c in chunks:
            if not self._chunk_file(name, c).is_file():
                raise damaged(self._chunk_file(name, c), "chunk missing (rows of the table are lost)")
        if rows == 0 or arr.shape[1] == 0:
            return np.full((rows, arr.shape[1]), arr.metadata.fill_value, dtype=arr.dtype)
        try:
            return np.asarray(await arr.getitem((slice(0, rows), slice(None))))
        except Exception:
            pass
        for c in range(-(-rows // CHUNK_ROWS)):  # find the bad chunk to name it
            try:
                await arr.getitem((slice(c * CHUNK_ROWS, min(rows, (c + 1) * CHUNK_ROWS)), slice(None)))
            except Exception as exc:
                raise damaged(self._chunk_file(name, c), exc) from None
        raise damaged(metadata_file(self._root, f"{_GROUP}/{name}"), "unreadable")

    def _adopt(
        self,
        rows: int,
        path: npt.NDArray[Any],
        info: npt.NDArray[Any],
        counters: npt.NDArray[Any],
        rank: npt.NDArray[Any] | None,
        fragments: int | None,
    ) -> None:
        """Check the rows read from disk and install them as the mirrors and the index."""
        ids = np.arange(rows)
        frag, parent, status, worker, epoch = (info[:, k] for k in range(INFO_WIDTH))
        done = status == DONE
        late = np.flatnonzero(done & (epoch > self.epoch))
        if late.size:
            r = int(late[0])
            problem = f"the commit record (epoch {self.epoch}) is older than done row {r} (epoch {epoch[r]})"
            raise damaged(metadata_file(self._root, _GROUP), problem)
        safe_parent = np.where((parent >= 0) & (parent < ids), parent, 0)
        bad_info = (
            (frag < 0)
            | ((frag >= fragments) if fragments is not None else False)
            | (parent < -1)
            | (parent >= ids)
            | ((parent >= 0) & (frag[safe_parent] != frag))
            | ((status != PENDING) & ~done)
            | np.where(done, (worker < 0) | (worker >= len(self.workers)), worker != -1)
            | np.where(done, epoch < 0, epoch != -1)
        )
        self._reject(bad_info, "info", "task info is impossible (fragment, parent, status, worker or epoch)")
        valid = path >= 0
        length = valid.sum(axis=1)
        bad_path = (path < -1).any(axis=1) | (valid != (np.arange(MAX_DEPTH) < length[:, None])).any(axis=1)
        self._reject(bad_path, "path", "task path is impossible")
        if counters.shape[1]:
            self._reject(done & np.isnan(counters).any(axis=1), "counters", "a done task has no counters")
        if rank is not None:
            self._reject(rank[:, 0] < UNRANKED, "rank", "task rank is impossible")
        self.rows = self._flushed = rows
        self._committed = self._state(rows)
        self._path = _grow(self._path, rows, FILL)
        self._info = _grow(self._info, rows, FILL)
        self._counters = _grow(self._counters, rows, math.nan)
        self._path[:rows], self._info[:rows], self._counters[:rows] = path, info, counters
        if rank is not None:
            self._rank = _grow(self._rank, rows, FILL)
            self._rank[:rows] = rank
        depth = int(length.max()) if rows else 0
        for r, (f, p, n) in enumerate(zip(frag.tolist(), path[:, :depth].tolist(), length.tolist(), strict=True)):
            key = (f, tuple(p[:n]))
            if key in self._index:
                problem = f"row {r} repeats the task of row {self._index[key]}"
                raise damaged(self._chunk_file("path", r // CHUNK_ROWS), problem)
            self._index[key] = r

    def _reject(self, bad: npt.NDArray[np.bool_], name: str, what: str) -> None:
        rows = np.flatnonzero(bad)
        if rows.size:
            r = int(rows[0])
            raise damaged(self._chunk_file(name, r // CHUNK_ROWS), f"{what} in row {r} ({rows.size} rows bad)")

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
            self._path = _grow(self._path, rows, FILL)
            self._info = _grow(self._info, rows, FILL)
            self._counters = _grow(self._counters, rows, math.nan)
            self._rank = _grow(self._rank, rows, FILL)
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
        write_record(self._store, _GROUP, attrs)
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
                write_atomic(self._chunk_file(name, c), encode_chunk(block), durable=self._store.durable)
