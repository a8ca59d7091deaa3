"""Opening a run store for its writer: the path checked, an old store set aside for `--fresh`, a new
one built, the identity compared and the writer's lock taken, before `RunStore` reads anything."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mugraph.storage.run.atomic_store import remove_temp_files
from mugraph.storage.run.errors import MISMATCH_HINT, OtherProgram, StoreError, StoreMismatch
from mugraph.storage.run.lock import StoreLock
from mugraph.storage.run.records import normalize
from mugraph.storage.run.root import (
    RootAttrs,
    clean_siblings,
    create_store,
    discard_store,
    has_entries,
    looks_like_store,
    read_root,
    stored_program,
)

__all__ = ["Opening", "open_for_writing"]


@dataclass(frozen=True)
class Opening:
    """A store ready to be read by its writer: the lock it holds, whether this open made it, its root."""

    lock: StoreLock
    created: bool
    attrs: RootAttrs


def open_for_writing(
    path: Path,
    identity: Mapping[str, str],
    meta: Mapping[str, Any] | None,
    counter_names: Sequence[str],
    *,
    fresh: bool,
    durable: bool,
) -> Opening:
    """Create the store at `path` if missing (with `fresh`, replace it), check that it was made for
    `identity` (StoreMismatch) and take its lock (StoreBusy); the caller releases the lock if it
    fails to open the store after this. A store of another program is neither resumed nor replaced
    (OtherProgram): `fresh` starts over a run of the same program only."""
    ident = {str(k): v for k, v in identity.items()}
    bad = [k for k, v in ident.items() if not isinstance(v, str)]
    if bad:
        raise ValueError(f"identity values must be str; not for {bad}")
    meta_json = normalize(dict(meta or {}), "meta")
    clean_siblings(path)
    if path.exists() and not path.is_dir():
        raise StoreError(f"run store path {path} is a file, not a directory; choose another --store")
    if has_entries(path):
        held = stored_program(path)
        if held is not None and "program" in ident and held != ident["program"]:
            raise OtherProgram(path, held, ident["program"], fresh=fresh)
    if fresh and has_entries(path):
        if path.is_symlink():  # the link would be moved away and the store it names kept
            raise StoreError(
                f"refusing to delete {path} for --fresh: it is a symbolic link (to {os.readlink(path)}), and "
                "--fresh would replace the link, not the run store it names; give that store's own path as "
                "--store (store=), or delete it yourself"
            )
        if not looks_like_store(path):
            raise StoreError(
                f"refusing to delete {path} for --fresh: it is not a mugraph run store; choose another --store"
            )
        discard_store(path)
    lock: StoreLock | None = None
    created = False
    if not has_entries(path):
        lock = create_store(path, ident, meta_json, list(counter_names), durable)
        created = lock is not None
    try:
        attrs = read_root(path)
        stored = attrs["identity"]
        diffs = [
            f"{k}: stored {stored.get(k, '(none)')!r}, given {ident.get(k, '(none)')!r}"
            for k in sorted(set(stored) | set(ident))
            if stored.get(k) != ident.get(k)
        ]
        if diffs:
            raise StoreMismatch(f"run store {path} was made for another run ({'; '.join(diffs)}); {MISMATCH_HINT}")
        if lock is None:
            lock = StoreLock.acquire(path)
            remove_temp_files(path)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return Opening(lock, created, attrs)
