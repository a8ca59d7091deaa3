"""A run store's directory as a whole: its root attributes, building a new one beside its path and
renaming it into place (so a directory at the path is complete or empty), and deleting one for --fresh.

The root group's attributes are `format` ("mugraph-run-store"), `schema`, `identity` (compared on open),
`meta` (free: the command line that made the store, versions), `store` (a random id of this store,
which every record's checksum covers: `records.seal`) and `crc32` (of all of them).

A store of schema 3, made before `store` was kept, has none, and its `crc32` covers format, schema and
identity only: it stays readable and resumable as it was written (its records sealed without an id,
the version it has kept); a store of schema 4 must have an id and its meta under its checksum (an older
mugraph refuses it by its version, not as damage). No checksum is a defence against an edit
(anyone can recompute one), which is why no reader runs a program file a store's meta names
(`run.store_program`).

A store holds no symbolic link: Zarr and the writer open files by name, so a link planted inside (a
record's directory, a chunk, the lock) would redirect a write to its target. `read_root`, which every
open starts with, refuses one as damage naming it; --fresh deletes such a store without following any."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import uuid
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import zarr.api.asynchronous as zasync
from zarr.core.sync import sync as zarr_sync

from mugraph.storage.processes import pid_alive
from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.errors import MISMATCH_HINT, StoreError, StoreMismatch, damaged
from mugraph.storage.run.ledger import Ledger
from mugraph.storage.run.lock import LOCK_NAME, StoreLock
from mugraph.storage.run.records import canonical_json, run_tag
from mugraph.storage.run.run_records import JsonObject
from mugraph.storage.run.task_table import TaskTable
from mugraph.storage.safe_files import LINK_PROBLEM, find_link

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "SIBLING_EXTRA",
    "RootAttrs",
    "clean_siblings",
    "create_store",
    "discard_store",
    "has_entries",
    "looks_like_store",
    "read_root",
    "seal_key",
    "stored_program",
]

# 2: the ledger of committed records; 3: the task table, fragments, timeline, rankings and final
# record carry the run tag
# (an older store's would all read as written for another run, so it is refused by its version)
# 4: the root's checksum covers meta and the store's id, which every record's checksum covers
SCHEMA_VERSION = 4
_NO_ID_SCHEMA = 3  # read and resumed as written: no store id, a checksum of format, schema, identity
FORMAT = "mugraph-run-store"
_SIBLING = re.compile(r"\.(?P<name>.+)\.mugraph-(?:new|old)-(?P<pid>\d+)-[0-9a-f]+")
# The bytes a store's name gains in the name of the store built (or deleted) beside it: "." before it and
# ".mugraph-new-PID-XXXXXXXX" after it, a Linux pid having at most 7 digits. Its neighbours gain fewer
# (NAME.zarr.memo, NAME.report.html).
SIBLING_EXTRA = len(".") + len(".mugraph-new-") + 7 + len("-") + 8


class RootAttrs(TypedDict):
    """The root group's attributes, as `read_root` checked them."""

    format: str
    schema: int
    identity: dict[str, str]  # what a resumed run must match
    meta: JsonObject  # free-form: the command line, versions
    store: str  # this store's random id ("" in a store made before it was kept)
    crc32: int  # of format, schema, identity and, where there is a store id, meta and it


STORE_KEY = "store"
_OLD_SCOPE = ("format", "schema", "identity")  # what the checksum of a store without an id covers
_SCOPE = (*_OLD_SCOPE, "meta", STORE_KEY)


def _root_crc(attrs: Mapping[str, Any]) -> int:
    scope = _OLD_SCOPE if attrs.get("schema") == _NO_ID_SCHEMA else _SCOPE
    return zlib.crc32(canonical_json({k: attrs.get(k) for k in scope}).encode())


def seal_key(attrs: Mapping[str, Any]) -> str:
    """What the checksum of each record of the store with root `attrs` covers beside the record: the
    store's id, so a record copied in from another store (of the same run, even) fails its check."""
    key = attrs.get(STORE_KEY, "")
    return key if isinstance(key, str) else ""


def _sibling(path: Path, kind: str) -> Path:
    return path.parent / f".{path.name}.mugraph-{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def clean_siblings(path: Path) -> None:
    """Remove half-built or half-deleted stores that a killed `open` left next to `path`."""
    if not path.parent.is_dir():
        return
    for entry in path.parent.iterdir():
        m = _SIBLING.fullmatch(entry.name)
        if m and m["name"] == path.name and not pid_alive(int(m["pid"])):
            shutil.rmtree(entry, ignore_errors=True)


def has_entries(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def looks_like_store(path: Path) -> bool:
    """True if `path` was made by this module (its lock file, or a root marked with FORMAT)."""
    if (path / LOCK_NAME).is_file():
        return True
    try:
        return bool(json.loads((path / "zarr.json").read_text())["attributes"]["format"] == FORMAT)
    except Exception:
        return False


def stored_program(path: Path) -> str | None:
    """The program named in the identity of the run store at `path`, read without `read_root`'s checks
    (a store of an older schema or with a damaged root still names it); None where none can be read."""
    try:
        attrs = json.loads((path / "zarr.json").read_text())["attributes"]
        program = attrs["identity"]["program"] if attrs["format"] == FORMAT else None
    except Exception:
        return None
    return program if isinstance(program, str) else None


def read_root(path: Path) -> RootAttrs:
    """The root attributes, checked: a run store without links inside, this schema version, an intact
    identity."""
    file = path / "zarr.json"
    ours = os.path.lexists(path / LOCK_NAME)
    if ours or os.path.lexists(file):
        link = find_link(path)
        if link is not None:
            raise damaged(link, LINK_PROBLEM)
    if not file.is_file():
        if ours:
            raise damaged(file, "missing")
        raise StoreError(f"{path} is not a mugraph run store (it has no zarr.json); give a run store's path")
    store = AtomicLocalStore(path, read_only=True)
    try:
        group = zarr_sync(zasync.open_group(store=store, path="", mode="r", zarr_format=3, use_consolidated=False))
        attrs = dict(group.attrs)
    except Exception as exc:
        raise damaged(file, exc) from None
    if attrs.get("format") != FORMAT:
        if ours:
            raise damaged(file, "the root has lost its run-store attributes")
        raise StoreError(f"{path} is a Zarr store but not a mugraph run store; give a run store's path")
    schema = attrs.get("schema")
    if schema not in (_NO_ID_SCHEMA, SCHEMA_VERSION) or isinstance(schema, bool):
        raise StoreMismatch(
            f"run store {path} has schema version {schema!r}; this mugraph reads versions "
            f"{_NO_ID_SCHEMA} and {SCHEMA_VERSION}; {MISMATCH_HINT}"
        )
    ident, meta, key = attrs.get("identity"), attrs.get("meta"), attrs.get(STORE_KEY, "")
    if attrs.get("crc32") != _root_crc(attrs) or not isinstance(meta, dict):
        raise damaged(file, "checksum mismatch in the root attributes")
    if not isinstance(ident, dict) or not all(isinstance(v, str) for v in ident.values()):
        raise damaged(file, "identity is not a mapping of strings")
    if not isinstance(key, str) or (schema == SCHEMA_VERSION) != bool(key):
        raise damaged(file, f"the store id {key!r:.40} does not fit schema version {schema}")
    return {
        "format": FORMAT,
        "schema": schema,
        "identity": ident,
        "meta": meta,
        "store": key,
        "crc32": attrs["crc32"],
    }


def create_store(
    path: Path, identity: dict[str, str], meta: JsonObject, counter_names: list[str], durable: bool
) -> StoreLock | None:
    """Build a new store beside `path` and rename it into place; its lock, or None if another won."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "new")
    tmp.mkdir()
    lock = StoreLock.acquire(tmp)
    try:
        key = uuid.uuid4().hex
        store = AtomicLocalStore(tmp, durable=durable, seal_key=key)
        attrs = {"format": FORMAT, "schema": SCHEMA_VERSION, "identity": identity, "meta": meta, STORE_KEY: key}
        attrs["crc32"] = _root_crc(attrs)

        async def build() -> None:
            await zasync.create_group(store=store, attributes=attrs)
            await TaskTable.create(store, tmp, counter_names, run_tag(identity))

        zarr_sync(build())
        Ledger.create(tmp, durable=durable)
        try:
            os.rename(tmp, path)  # atomic; replaces an empty directory, fails on a non-empty one
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            lock.release()
            shutil.rmtree(tmp, ignore_errors=True)
            return None
    except BaseException:
        lock.release()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    lock.directory = path
    return lock


def discard_store(path: Path) -> None:
    """Delete the run store at `path` for --fresh, unless a live process holds it (StoreBusy).

    A link planted as the lock file is removed (not its target) so that the lock can be taken."""
    if (path / LOCK_NAME).is_symlink():
        (path / LOCK_NAME).unlink()
    lock = StoreLock.acquire(path)
    try:
        trash = _sibling(path, "old")
        os.rename(path, trash)  # the path is empty from here on; a crash leaves only the sibling
        shutil.rmtree(trash, ignore_errors=True)
    finally:
        lock.release()
