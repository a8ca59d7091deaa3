"""Edits a person could make to a run store's records with their checksums recomputed (a crc32 is
anyone's to recompute): what the commands that turn a store into code must still refuse."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.records import CRC_KEY, seal
from mugraph.storage.run.root import read_root, seal_key


def store_key(store: Path) -> str:
    """The id the records of `store` are sealed with (anyone can read it from its root)."""
    return seal_key(read_root(store))


def record_store(store: Path, *, read_only: bool = False) -> AtomicLocalStore:
    """`store` opened to read or write its records as the run does, sealed with its id."""
    return AtomicLocalStore(store, read_only=read_only, seal_key=store_key(store))


def resealed(store: Path, record: str, change: Callable[[dict[str, object]], None]) -> None:
    """The record at `record` (`final`, `found/0/D`) passed through `change`, its checksum recomputed
    for its store (anyone can)."""
    file = store / record / "zarr.json"
    meta = json.loads(file.read_text())
    attrs = {k: v for k, v in meta["attributes"].items() if k != CRC_KEY}
    change(attrs)
    meta["attributes"] = seal(attrs, store_key(store))
    file.write_text(json.dumps(meta))


def edit_final_program(store: Path, edit: Callable[[str], str]) -> None:
    """The final record's stitched program (its JSON text) passed through `edit`, the record resealed."""
    file = store / "final" / "zarr.json"
    meta = json.loads(file.read_text())
    attrs = {k: v for k, v in meta["attributes"].items() if k != CRC_KEY}
    before = attrs["final"]["program_graph"]
    attrs["final"]["program_graph"] = edit(before)
    assert attrs["final"]["program_graph"] != before, "the edit changed nothing"
    meta["attributes"] = seal(attrs, store_key(store))
    file.write_text(json.dumps(meta))


def first_kind(old: str, new: str) -> Callable[[str], str]:
    """An edit that turns the first op of kind `old` into one of kind `new`."""
    return lambda text: text.replace(f'"kind":"{old}"', f'"kind":"{new}"', 1)


def file_digests(path: Path) -> dict[str, str]:
    """Every file of the store by its path, as a digest of its bytes (the lock file aside: each locking
    opener writes its pid there)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != "mugraph.lock"
    }
