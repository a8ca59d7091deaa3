"""Opening a run store's task table from disk: its commit record and arrays checked, its committed
rows read and checked, then handed to `TaskTable.install`. Apart from the table's writing (in
`task_table`), since every open reads and the writer never does.

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

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import zarr.api.asynchronous as zasync
from zarr.core.array import AsyncArray

from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.chunk_codec import CODEC_DICTS
from mugraph.storage.run.errors import damaged
from mugraph.storage.run.records import RUN_KEY, check_run_tag, metadata_file, read_record
from mugraph.storage.run.task_table import (
    CHUNK_ROWS,
    DONE,
    EPOCH,
    FRAGMENT,
    GROUP,
    INFO_WIDTH,
    MAX_DEPTH,
    PENDING,
    STATUS,
    UNRANKED,
    ArraySpec,
    Key,
    TaskTable,
    array_specs,
    chunk_file,
)

__all__ = ["load_task_table"]

Arrays = Mapping[str, AsyncArray[Any]]


async def load_task_table(
    store: AtomicLocalStore, root: Path, fragments: int | None, exclusive: bool, run: str
) -> TaskTable:
    """Read and check the committed rows of the table made for the run tagged `run`; StoreDamaged
    naming the file at the first problem.

    The commit record first, then info, then the rest: what a done row needs was written before
    it. Not `exclusive` (no lock: a writer may be running), tasks done after the commit record's
    epoch are taken as pending."""
    attrs = await read_record(store, root, GROUP)
    file = metadata_file(root, GROUP)
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
    arrays = {s.name: await _open_array(store, root, s, len(names), rows) for s in array_specs(ranked)}
    kept = {
        "counter_names": names,
        "workers": workers,
        "epoch": epoch,
        "found": found,
        "ranked": ranked,
        RUN_KEY: run,
    }
    table = TaskTable(store, root, arrays, kept)
    info = await _read(root, arrays, "info", rows, range(-(-rows // CHUNK_ROWS)))
    if not exclusive:
        later = (info[:, STATUS] == DONE) & (info[:, EPOCH] > epoch)
        info[later, STATUS:] = (PENDING, -1, -1)
    done_chunks = sorted({int(r) // CHUNK_ROWS for r in np.flatnonzero(info[:, STATUS] == DONE)})
    counters = await _read(root, arrays, "counters", rows, done_chunks if names else [])
    path = await _read(root, arrays, "path", rows, range(-(-rows // CHUNK_ROWS)))
    rank = await _read(root, arrays, "rank", rows, range(-(-rows // CHUNK_ROWS))) if ranked else None
    _check_rows(root, arrays, epoch, len(workers), fragments, path, info, counters, rank)
    table.install(rows, path, info, counters, rank, _index(root, arrays, path, info))
    return table


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


async def _open_array(
    store: AtomicLocalStore, root: Path, spec: ArraySpec, counters: int, rows: int
) -> AsyncArray[Any]:
    name = f"{GROUP}/{spec.name}"
    file = metadata_file(root, name)
    if not file.is_file():
        raise damaged(file, "missing")
    try:
        arr = await zasync.open_array(store=store, path=name, mode="r" if store.read_only else "r+", zarr_format=3)
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


async def _read(root: Path, arrays: Arrays, name: str, rows: int, chunks: Sequence[int]) -> npt.NDArray[Any]:
    """Rows [0, rows) of array `name`; the given chunks must exist on disk."""
    arr = arrays[name]
    for c in chunks:
        if not chunk_file(root, arrays, name, c).is_file():
            raise damaged(chunk_file(root, arrays, name, c), "chunk missing (rows of the table are lost)")
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
            raise damaged(chunk_file(root, arrays, name, c), exc) from None
    raise damaged(metadata_file(root, f"{GROUP}/{name}"), "unreadable")


def _check_rows(
    root: Path,
    arrays: Arrays,
    committed_epoch: int,
    workers: int,
    fragments: int | None,
    path: npt.NDArray[Any],
    info: npt.NDArray[Any],
    counters: npt.NDArray[Any],
    rank: npt.NDArray[Any] | None,
) -> None:
    """Check the rows read from disk against each other and the commit record (its epoch, its number
    of workers); StoreDamaged naming the chunk of the first impossible row."""
    ids = np.arange(info.shape[0])
    frag, parent, status, worker, epoch = (info[:, k] for k in range(INFO_WIDTH))
    done = status == DONE
    late = np.flatnonzero(done & (epoch > committed_epoch))
    if late.size:
        r = int(late[0])
        problem = f"the commit record (epoch {committed_epoch}) is older than done row {r} (epoch {epoch[r]})"
        raise damaged(metadata_file(root, GROUP), problem)
    safe_parent = np.where((parent >= 0) & (parent < ids), parent, 0)
    bad_info = (
        (frag < 0)
        | ((frag >= fragments) if fragments is not None else False)
        | (parent < -1)
        | (parent >= ids)
        | ((parent >= 0) & (frag[safe_parent] != frag))
        | ((status != PENDING) & ~done)
        | np.where(done, (worker < 0) | (worker >= workers), worker != -1)
        | np.where(done, epoch < 0, epoch != -1)
    )
    _reject(root, arrays, bad_info, "info", "task info is impossible (fragment, parent, status, worker or epoch)")
    valid = path >= 0
    length = valid.sum(axis=1)
    bad_path = (path < -1).any(axis=1) | (valid != (np.arange(MAX_DEPTH) < length[:, None])).any(axis=1)
    _reject(root, arrays, bad_path, "path", "task path is impossible")
    if counters.shape[1]:
        _reject(root, arrays, done & np.isnan(counters).any(axis=1), "counters", "a done task has no counters")
    if rank is not None:
        _reject(root, arrays, rank[:, 0] < UNRANKED, "rank", "task rank is impossible")


def _reject(root: Path, arrays: Arrays, bad: npt.NDArray[np.bool_], name: str, what: str) -> None:
    rows = np.flatnonzero(bad)
    if rows.size:
        r = int(rows[0])
        raise damaged(chunk_file(root, arrays, name, r // CHUNK_ROWS), f"{what} in row {r} ({rows.size} rows bad)")


def _index(root: Path, arrays: Arrays, path: npt.NDArray[Any], info: npt.NDArray[Any]) -> dict[Key, int]:
    """The (fragment, path) → row index of checked rows; StoreDamaged at a row repeating an earlier task."""
    length = (path >= 0).sum(axis=1)
    depth = int(length.max()) if path.shape[0] else 0
    index: dict[Key, int] = {}
    for r, (f, p, n) in enumerate(
        zip(info[:, FRAGMENT].tolist(), path[:, :depth].tolist(), length.tolist(), strict=True)
    ):
        key = (f, tuple(p[:n]))
        if key in index:
            problem = f"row {r} repeats the task of row {index[key]}"
            raise damaged(chunk_file(root, arrays, "path", r // CHUNK_ROWS), problem)
        index[key] = r
    return index
