"""A small run store filled as a driver fills it (three fragments, a tree of tasks), for the
store's tests."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from mugraph.storage.run import task_table
from mugraph.storage.run.run_records import ConfirmationRecord, FragmentRecord, LayoutRecord
from mugraph.storage.run.store import (
    FoundRecord,
    RunStore,
)
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G

IDENTITY = {"program": "lora", "program_digest": "p1", "config_digest": "c1", "budget": "1000"}


COUNTERS = ("states", "depth")


def fragment(name: str, digest: str) -> FragmentRecord:
    return {
        "name": name,
        "digest": digest,
        "graph": G("reference"),
        "config": "{}",
        "preset": "mlp",
        "sources": ["x"],
        "outputs": ["y"],
    }


def confirmation(digest: str, equivalent: bool = True) -> ConfirmationRecord:
    """A confirmation record as confirm_task returns it (its values made up)."""
    return {
        "equivalent": equivalent,
        "seeds": [1, 2],
        "float_max_rel_err": 1e-12 if equivalent else None,
        "reason": "" if equivalent else "fingerprints differ",
        "seconds": 0.5,
        "backend": "numpy",
        "digest": digest,
        "worker": "tcp://w1",
        "wall_seconds": 0.6,
    }


def layout(digest: str) -> LayoutRecord:
    """A layout record as layout_task returns it (its values made up)."""
    return {
        "schema": "mugraph.layout/1",
        "layouts": {"kernel": [1, 0]},
        "terms": {"transposes": 5},
        "objective": 5,
        "solve_seconds": 0.1,
        "io_layouts": {},
        "digest": digest,
        "worker": "tcp://w1",
        "wall_seconds": 0.2,
    }


FRAGMENTS = [fragment(f"f{i}", f"{i}" * 8) for i in range(3)]


def new_store(path: Path, **kw: Any) -> RunStore:
    return RunStore.open(path, IDENTITY, meta={"argv": ["mugraph", "optimize"]}, counter_names=COUNTERS, **kw)


def children_of(path: tuple[int, ...]) -> list[tuple[int, ...]]:
    """0 to 4 children, none below depth 6: 242 tasks per fragment, 726 in all (two chunks of rows)."""
    if len(path) >= 6:
        return []
    k = zlib.crc32(repr(path).encode()) % 5 if path else 3
    return [(*path, i) for i in range(k)]


def found_of(fragment: int, path: tuple[int, ...], row: int) -> list[FoundRecord]:
    """Digests shared by many paths, so keep-the-smaller-path matters."""
    if len(path) < 2:
        return []
    key = f"d{fragment}x{(path[-1] + 2 * path[-2]) % 5}"
    return [FoundRecord(fragment, D(key), path, G(key), row)]


def complete(store: RunStore, t: task_table.TaskRecord, worker: str = "w0") -> list[int]:
    return store.complete_task(
        t.row,
        counters={"states": 1.0, "depth": float(len(t.path))},
        worker=worker,
        found=found_of(t.fragment, t.path, t.row),
        children=children_of(t.path),
    )


def run_to_end(store: RunStore, worker: str = "w0", limit: int | None = None) -> int:
    """Complete pending tasks in row order until none is left (or `limit` completions); how many."""
    n = 0
    if not store.fragments():
        store.set_fragments(FRAGMENTS)
    store.add_tasks([(f, (), -1) for f in range(len(FRAGMENTS))])
    while todo := store.pending():
        for t in todo:
            if limit is not None and n >= limit:
                return n
            complete(store, t, worker)
            n += 1
    return n
