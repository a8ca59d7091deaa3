"""Found μGraphs in a run store: `found/<fragment>/<digest>/` records (path, graph JSON, the task row that
found it and, since find times are kept, `seconds` and `states`: when the run first found it),
written by `RunStore.complete_tasks` before the task is marked done (a search cut at the run's time
limit writes its finds and leaves its task pending: the task that reruns it finds them again).

A record is content-addressed: its name is the canonical digest of its graph. Reading one hashes the
graph again (about half a millisecond), once per record per open, since the records of a fragment are
kept in memory after their first read; a graph that does not hash to its name (two records swapped, one
copied over another) is damage, never a μGraph shown under another's digest."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.serialize import loads
from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.errors import damaged
from mugraph.storage.run.records import metadata_file, read_record, record_names
from mugraph.storage.run.task_records import FoundRecord, check_find_time, first_found
from mugraph.storage.run.task_table import check_path

__all__ = [
    "FoundRecord",
    "check_find_time",
    "check_graph_digest",
    "first_found",
    "found_attrs",
    "found_record",
    "graph_digest",
    "load_found",
]


def found_attrs(rec: FoundRecord) -> dict[str, Any]:
    """The attributes of a found record as stored (the find time only where there is one)."""
    attrs: dict[str, Any] = {"path": list(rec.path), "graph": rec.graph, "task": rec.task}
    if rec.seconds is not None:
        attrs["seconds"] = float(rec.seconds)
        attrs["states"] = rec.states
    return attrs


async def load_found(
    store: AtomicLocalStore, root: Path, fragment: int, rows: int, readonly: bool
) -> dict[str, FoundRecord]:
    """The found records of `fragment`, checked (StoreDamaged naming the file, never an assertion: stored
    data is input); `rows` is the task table's committed row count, which the writer's records' tasks
    must be below."""
    base = f"found/{fragment}"
    names = record_names(root, base)
    records = await asyncio.gather(*(read_record(store, root, f"{base}/{n}") for n in names))
    out: dict[str, FoundRecord] = {}
    for name, attrs in zip(names, records, strict=True):
        file = metadata_file(root, f"{base}/{name}")
        if attrs is None:  # listed a moment ago; records are never deleted
            raise damaged(file, "missing (removed while the store was being read)")
        out[name] = found_record(fragment, name, attrs, file, rows, readonly)
    for name, rec in out.items():
        check_graph_digest(rec.graph, name, metadata_file(root, f"{base}/{name}"))
    return out


def found_record(
    fragment: int, name: str, attrs: Mapping[str, Any], file: Path, rows: int, readonly: bool
) -> FoundRecord:
    """The found record `name` of `fragment` from its unsealed `attrs`, its fields checked (not its
    graph's digest: `check_graph_digest`); StoreDamaged naming `file` otherwise."""
    try:
        task, graph, raw_path = attrs["task"], attrs["graph"], attrs["path"]
        seconds, states = attrs.get("seconds"), attrs.get("states")
        check_find_time(seconds, states, "found")
        if not isinstance(raw_path, list) or not all(type(x) is int for x in raw_path):
            raise TypeError(f"path must be a list of integers, not {raw_path!r:.60}")
        path = check_path(raw_path, "found")
        if not isinstance(graph, str) or isinstance(task, bool) or not isinstance(task, int) or task < 0:
            raise ValueError("graph must be text and task a row number")
        if task >= rows and not readonly:
            raise ValueError(f"task {task} is not a row of the task table")
        # A reader's snapshot of the task table can predate the row of a task a live writer has
        # since completed. Its record is kept: it may be the rewrite of a record that a task in
        # the snapshot made (a later task found the same μGraph at a smaller path), and the
        # μGraph exists either way. For the writer itself such a record is damage.
    except (KeyError, TypeError, ValueError) as exc:
        raise damaged(file, exc) from None
    return FoundRecord(fragment, name, path, graph, task, seconds, states)


def graph_digest(graph: str, file: Path) -> str:
    """The canonical digest of the graph JSON `graph`; StoreDamaged naming `file` if it is not a
    kernel graph."""
    try:
        return canonical_digest(loads(graph))
    except Exception as exc:  # stored data is input: whatever it breaks is damage, never a traceback
        raise damaged(file, f"the graph is not a kernel graph ({type(exc).__name__}: {exc})") from None


def check_graph_digest(graph: str, digest: str, file: Path) -> None:
    """StoreDamaged naming `file` unless the graph JSON `graph` hashes to `digest`."""
    actual = graph_digest(graph, file)
    if actual != digest:
        raise damaged(file, f"the graph hashes to {actual[:16]}, not to {digest[:16]}, the digest that names it")
