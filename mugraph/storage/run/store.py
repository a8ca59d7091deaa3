"""The run store: the record of truth of one search, a Zarr v3 directory written by the driver alone.

Layout (every node is a group or array with one `zarr.json`; JSON records carry a `crc32`, see
`mugraph.storage.run.records`)::

    <store>/                        root group; attrs: format "mugraph-run-store", schema (int),
                                    identity {str: str} (compared on open), meta (free, not compared),
                                    store (a random id), crc32 (of them all; see `root`)
      mugraph.lock                  flock lock file of the single writer (holds its pid)
      ledger.jsonl                  every record committed, one line each (see `mugraph.storage.run.ledger`)
      fragments/                    attrs: fragments [ {name, digest, graph, config, ...} ], run  (written once)
      tasks/                        attrs (the commit record): rows, epoch, counter_names, workers,
                                    found (records per fragment), run
        path/      int32  [cap, 64] choice path from the root, padded with -1      chunks 512 rows,
        info/      int64  [cap, 5]  fragment, parent|-1, status 0|1, worker|-1,    zstd + crc32c,
                                    epoch|-1
        counters/  float64[cap, C]  a done task's counters, named by counter_names fill -2 / NaN
      found/<fragment>/<digest>/    attrs: path [int], graph (JSON text), task (row), seconds and states
                                    (when the run first found it; absent in older stores)
      confirmations/<fragment>/<digest>/   attrs: result {equivalent, seeds, error, run_seconds, ...}
      layouts/<fragment>/<digest>/  attrs: result {schema, layouts, terms, objective, solve_seconds}
      measurements/<fragment>/<digest>/   attrs: result {median_seconds, device, max_rel_err, ...} (GPU timings)
      rankings/<fragment>/          attrs: ranking [ {...} ], run
      timeline/<invocation>/        attrs: samples [ progress event, ... ], run (one record per invocation)
      final/                        attrs: final {...}, run
      experts/                      attrs: experts [ {label, digest} ], run (the program's experts, rewritten
                                    by every invocation; absent in older stores)

Surviving `kill -9` at any instant. Every file is replaced atomically (`AtomicLocalStore`), so each
file is old or new. A store is built in a hidden sibling directory and renamed into place, so a
directory at the store path is complete or empty; `fresh` renames the old store away before building
the new one. `complete_tasks` writes, for a batch of tasks, each step after the previous one is on disk: (1) the found
μGraphs, (2) the children's rows (their chunks, then the commit record with the new row count and
any new worker name), (3) the task's counters, (4) last, its status, in the same chunk write as its
worker and the commit epoch. So a task that reads as done has its results and its children on disk.
A crash before (4) leaves a pending task, which the driver reruns: rows past the committed count
(children written but not committed) are ignored and overwritten; committed children are found again
by (fragment, path) and not added twice; found μGraphs of the killed attempt are harmless, since the
rerun finds the same ones and a digest keeps the smaller path, whichever attempt wrote it. An explicit
commit replaces "use the common length of the task arrays": arrays may differ in capacity after a
crash mid-resize without consequence, and a deleted tail chunk is reported instead of silently
shortening the table. Readers (`open_existing`, no lock) may run beside the writer; the epoch keeps
their view consistent (see `mugraph.storage.run.task_table_load`).

`run` is the run tag (`records.run_tag`) of the root's identity: these records belong to one run,
and a table, fragment list, timeline, ranking or final record copied from another run's store, or a
root `zarr.json` copied over another run's records, is damage. Every record's checksum covers the store's
id (`root.seal_key`), so a record copied in from another store, even one of the same run identity,
is damage too. Records of μGraphs are named by the
canonical digest of their μGraph: a found record's graph must hash to its name, a confirmation,
layout or measurement must say it is about the μGraph that names it, and a ranking's reference row
must name the fragment's reference graph's digest; each is checked once per record per open.

Damage (invalid JSON, a record whose checksum fails, a chunk failing its crc32c, truncated or
missing, an impossible value, a committed record that is gone, records that contradict each other,
a symbolic link inside the store) raises StoreDamaged naming the file; nothing is ever guessed.
`repair` (with `repair_scan` and `repair_plan`) keeps the intact records of a damaged store and
drops or rebuilds the rest, into a state the resume above handles.

The pieces: `opening` (checks and the lock before a writer's open), `root` (root attributes,
building and deleting a whole store), `task_table` (read back by `task_table_load`), `found_records`,
`records` (sealed JSON records) and `record_files` (reading them), `ledger`, `cross_checks` (records
against each other), `safe_files` (opening without following links), `result_records` (the records
written whole: confirmations, layouts, measurements, rankings, timeline, final, experts, and the write
guards);
this module ties them into `RunStore`, the one production implementation of `protocol.RunStoreWriter`
(its records in `task_records` and `run_records`): opening, the fragments, the task table and the
found μGraphs, whose writes follow the order above.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from mugraph.ir.canonical import replaces_find
from mugraph.storage.run.atomic_store import AtomicLocalStore, remove_temp_files
from mugraph.storage.run.cross_checks import check_records
from mugraph.storage.run.errors import (
    MISMATCH_HINT,
    StoreBusy,
    StoreDamaged,
    StoreError,
    StoreMismatch,
)
from mugraph.storage.run.found_records import (
    FoundRecord,
    check_find_time,
    first_found,
    found_attrs,
    load_found,
)
from mugraph.storage.run.ledger import Ledger
from mugraph.storage.run.lock import StoreLock, writer_pid
from mugraph.storage.run.opening import open_for_writing
from mugraph.storage.run.record_checks import check_fragments
from mugraph.storage.run.record_files import RecordFiles, run_sync
from mugraph.storage.run.records import (
    RUN_KEY,
    canonical_json,
    check_run_tag,
    metadata_file,
    normalize,
    run_tag,
    write_record,
)
from mugraph.storage.run.result_records import ResultRecords
from mugraph.storage.run.root import (
    FORMAT,
    SCHEMA_VERSION,
    RootAttrs,
    read_root,
)
from mugraph.storage.run.run_records import FragmentRecord, JsonObject
from mugraph.storage.run.task_records import TaskCompletion, TaskRecord, TaskSummary, check_ranks
from mugraph.storage.run.task_table import CHUNK_ROWS, MAX_DEPTH, check_path
from mugraph.storage.run.task_table_load import load_task_table

__all__ = [
    "CHUNK_ROWS",
    "FORMAT",
    "MAX_DEPTH",
    "SCHEMA_VERSION",
    "FoundRecord",
    "RunStore",
    "StoreBusy",
    "StoreDamaged",
    "StoreError",
    "StoreMismatch",
    "TaskCompletion",
    "TaskRecord",
    "TaskSummary",
]


class RunStore(ResultRecords):
    """One run's tasks, found μGraphs, confirmations, rankings and final result, on disk (the records
    written whole, from confirmations to the final result, are its base `ResultRecords`).

    Used from one thread. Reads of tasks come from memory (loaded at open); found μGraphs are
    loaded per fragment on first use; confirmations, rankings and the final result are read on
    each call."""

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool,
        lock: StoreLock | None,
        durable: bool,
        created: bool,
        root_attrs: RootAttrs,
    ) -> None:
        self.created = created
        self.identity: dict[str, str] = dict(root_attrs["identity"])
        self.meta: JsonObject = dict(root_attrs["meta"])
        tag = run_tag(self.identity)
        self._lock = lock
        store = AtomicLocalStore(path, read_only=readonly, durable=durable, seal_key=root_attrs["store"])
        files = RecordFiles(store, path)
        ledger = Ledger.load(path, writer=lock is not None, durable=durable)  # every committed record is there
        super().__init__(path, readonly=readonly, tag=tag, store=store, files=files, ledger=ledger)
        self._found: dict[int, dict[str, FoundRecord]] = {}
        frags = self._files.read("fragments")
        if frags is not None:
            check_run_tag(frags, self._tag, metadata_file(path, "fragments"))
            self._fragments = check_fragments(frags.get("fragments"), metadata_file(path, "fragments"))
        count = len(self._fragments) if self._fragments is not None else None
        self._table = run_sync(load_task_table(self._store, path, count, exclusive=lock is not None, run=self._tag))
        final = self.final()  # the final record and the rankings before the listings (see cross_checks)
        rankings = [self.ranking(i) for i in range(count or 0)]
        check_records(path, self._fragments or [], final, rankings, self._table.found_counts)
        self._check_keyed_names(count or 0)  # found records are checked on first read

    # ---------------------------------------------------------------- opening and closing

    @classmethod
    def open(
        cls,
        path: Path,
        identity: Mapping[str, str],
        *,
        meta: Mapping[str, Any] | None = None,
        counter_names: Sequence[str] = (),
        fresh: bool = False,
        durable: bool = False,
    ) -> RunStore:
        """Open the store at `path` for writing, creating it if missing (or, with `fresh`, replacing it).

        An existing store must have this schema version and this identity (StoreMismatch) and no live
        writer (StoreBusy). `fresh` deletes only a directory that is a run store. `durable` fsyncs
        every write (power-loss safety, about 1 ms a file); a process crash never needs it."""
        path = Path(path)
        names = [str(n) for n in counter_names]
        opening = open_for_writing(path, identity, meta, names, fresh=fresh, durable=durable)
        try:
            store = cls(
                path,
                readonly=False,
                lock=opening.lock,
                durable=durable,
                created=opening.created,
                root_attrs=opening.attrs,
            )
        except BaseException:
            opening.lock.release()
            raise
        stored_names = list(store._table.counter_names)
        if names and names != stored_names:
            store.close()
            raise StoreMismatch(
                f"run store {path} was made for another run (counter_names: stored {stored_names}, given {names}); "
                f"{MISMATCH_HINT}"
            )
        return store

    @classmethod
    def open_existing(cls, path: Path, *, readonly: bool = True) -> RunStore:
        """Open an existing store without an identity check (for `mugraph status` / `show`).

        Read-only opens take no lock and may run beside a live writer."""
        path = Path(path)
        if not path.is_dir():
            raise StoreError(f"no run store at {path}")
        attrs = read_root(path)
        lock = None if readonly else StoreLock.acquire(path)
        try:
            if lock is not None:
                remove_temp_files(path)
            return cls(path, readonly=readonly, lock=lock, durable=False, created=False, root_attrs=attrs)
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    def close(self) -> None:
        """Release the lock. Idempotent; the store cannot be used afterwards."""
        self._closed = True
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---------------------------------------------------------------- fragments

    def set_fragments(self, fragments: Sequence[FragmentRecord]) -> None:
        """Record the fragments once; the same list again is a no-op, a different one StoreMismatch."""
        self._check_writable()
        value = normalize([dict(f) for f in fragments], "fragments")
        if self._fragments is not None:
            if canonical_json(value) != canonical_json(self._fragments):
                raise StoreMismatch(
                    f"run store {self.path} holds other fragments than these (another version of mugraph split "
                    f"the program into other graphs, whose search spaces differ); {MISMATCH_HINT}"
                )
            return
        used = self._table.summary()["fragments"]
        if used and max(used) >= len(value):
            raise ValueError(f"tasks refer to fragment {max(used)} but only {len(value)} fragments are given")
        with self._writing():
            write_record(self._store, "fragments", {"fragments": value, RUN_KEY: self._tag})
            self._ledger.add(["fragments"])
        self._fragments = value

    def fragments(self) -> list[FragmentRecord]:
        return copy.deepcopy(self._fragments) if self._fragments is not None else []

    # ---------------------------------------------------------------- tasks

    def add_tasks(self, items: Sequence[tuple[int, tuple[int, ...], int]]) -> list[int]:
        """Add (fragment, path, parent row) tasks, pending; a (fragment, path) already present keeps its row."""
        self._check_writable()
        checked = [(self._check_fragment(f), check_path(p, "add_tasks"), int(parent)) for f, p, parent in items]
        rows = self._table.stage(checked)  # memory only; a bad item raises before any change
        with self._writing():
            self._table.flush()
            self._table.commit()
        return rows

    def complete_task(
        self,
        row: int,
        *,
        counters: Mapping[str, float],
        worker: str,
        found: Sequence[FoundRecord],
        children: Sequence[tuple[int, ...]],
    ) -> list[int]:
        """Record one finished task (see `complete_tasks`); the children's rows, in the order of `children`."""
        return self.complete_tasks([TaskCompletion(row, counters, worker, found, children)])[0]

    def complete_tasks(self, items: Sequence[TaskCompletion]) -> list[list[int]]:
        """Record finished tasks: all found μGraphs, then all children rows, then counters, LAST the
        done statuses, so a batch costs a handful of file writes however many tasks it holds.

        Children belong to their task's fragment with the task as parent; one already present keeps
        its row. Each found record is stored with its task's row; a digest already stored keeps the
        smaller path and its first find time (`FoundRecord.seconds`, `states`). A task already done
        (or earlier in the batch) keeps its counters; its found and
        children are merged in. An item not `done` (cut at the time limit) adds its found records
        only: its task stays pending. Every item is checked before anything is written. Returns each
        item's children rows, in the order of its `children`."""
        self._check_writable()
        table = self._table
        best: dict[tuple[int, str], FoundRecord] = {}
        staged: list[tuple[int, list[tuple[int, tuple[int, ...], int]], list[float] | None, str]] = []
        ranks: list[list[int] | None] = []
        completing: set[int] = set()
        for item in items:
            row = item.row
            table.check_row(row)
            fragment = table.fragment_of(row)
            for rec in item.found:
                if rec.fragment != fragment:
                    raise ValueError(
                        f"found μGraph {rec.digest} is for fragment {rec.fragment}, task row {row} for {fragment}"
                    )
                if not isinstance(rec.graph, str):
                    raise ValueError(f"found μGraph {rec.digest}: graph must be JSON text")
                digest = self._check_digest(rec.digest)
                check_find_time(rec.seconds, rec.states, f"found μGraph {digest}")
                cand = FoundRecord(
                    fragment, digest, check_path(rec.path, f"found {digest}"), rec.graph, row, rec.seconds, rec.states
                )
                have = best.get((fragment, digest))
                if replaces_find(cand.path, None if have is None else have.path):
                    best[(fragment, digest)] = cand if have is None else first_found(cand, have)
            kids = [(fragment, check_path(p, f"child of row {row}"), row) for p in item.children]
            ranks.append(check_ranks(item.ranks, len(kids), f"children of row {row}"))
            values = table.counter_values(item.counters, row)
            first = item.done and not table.is_done(row) and row not in completing
            if item.done:
                completing.add(row)
            staged.append((row, kids, values if first else None, str(item.worker)))
        new_found = [
            r if kept is None else first_found(r, kept)
            for (f, d), r in best.items()
            if replaces_find(r.path, None if (kept := self._found_for(f).get(d)) is None else kept.path)
        ]
        rows = [table.stage(kids, r) for (_, kids, _, _), r in zip(staged, ranks, strict=True)]  # memory only, as below
        done_rows = []
        for row, _, completion, worker in staged:
            if completion is not None:
                table.stage_completion(row, completion, worker)
                done_rows.append(row)
        with self._writing():
            for r in new_found:
                write_record(self._store, f"found/{r.fragment}/{r.digest}", found_attrs(r))
            self._ledger.add(f"found/{r.fragment}/{r.digest}" for r in new_found)  # before the tasks are done
            for r in new_found:
                self._found_for(r.fragment)[r.digest] = r
            for f in {r.fragment for r in new_found}:
                table.found_counts[f] = len(self._found_for(f))
            table.flush()  # the children's chunks,
            table.commit()  # then their row count (and new workers' names, and found counts),
            table.write_counters(done_rows)  # then the counters,
            table.mark_done(done_rows)  # and last the statuses, with the workers, one write per chunk
        return rows

    def tasks(self) -> list[TaskRecord]:
        return self._table.records()

    def pending(self) -> list[TaskRecord]:
        return self._table.records(pending_only=True)

    def task_summary(self) -> TaskSummary:
        """{tasks, done, pending, fragments: {i: {done, pending}}, counters: sums over done tasks,
        workers: done tasks per worker}; numpy over the in-memory mirrors, no disk access."""
        return self._table.summary()

    # ---------------------------------------------------------------- found

    def found(self, fragment: int) -> dict[str, FoundRecord]:
        return dict(self._found_for(self._check_fragment(fragment)))

    def _found_for(self, fragment: int) -> dict[str, FoundRecord]:
        if fragment not in self._found:
            found = load_found(self._store, self.path, fragment, self._table.rows, self.readonly)
            self._found[fragment] = run_sync(found)
        return self._found[fragment]

    def writer(self) -> int | None:
        return os.getpid() if self._lock is not None and self._lock.held else writer_pid(self.path)

    # ---------------------------------------------------------------- size

    def size_bytes(self) -> int:
        """Bytes of all files of the store on disk."""
        return self._files.size_bytes()
