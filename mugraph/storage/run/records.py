"""Small JSON records kept as Zarr group attributes (one `zarr.json` each), sealed with a checksum.

Zarr checksums chunks (crc32c codec) but not metadata, so a bit flip inside a `zarr.json` would pass
as valid JSON with a wrong value. Every record therefore carries `crc32`, the CRC-32 of the store's
id (`root.seal_key`, the key the store is opened with) followed by the canonical JSON of its other
attributes; a mismatch is reported as damage, never returned. The id binds a record to its store: one
copied in from another store, even of the same program and run identity, fails its check (a store
made before it had an id seals with an empty key: the canonical JSON alone). Values are normalised
through JSON before they are sealed so that what a caller gets back equals what was stored.

A record is replaced by rewriting its `zarr.json` (one atomic file), never by deleting and recreating
the group, so a crash leaves the old record or the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import zarr.api.asynchronous as zasync
from zarr.abc.store import Store

from mugraph.storage.run.atomic_store import AtomicLocalStore, write_atomic
from mugraph.storage.run.errors import StoreError, damaged
from mugraph.storage.run.run_records import JsonObject

__all__ = [
    "CRC_KEY",
    "RUN_KEY",
    "canonical_json",
    "check_run_tag",
    "normalize",
    "read_record",
    "record_names",
    "run_tag",
    "seal",
    "sealed_group_json",
    "unseal",
    "write_record",
]

CRC_KEY = "crc32"
RUN_KEY = "run"  # the run_tag of the identity a record was written for


def canonical_json(value: Any) -> str:
    """The one JSON text of `value` that checksums and equality tests use."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def run_tag(identity: Mapping[str, str]) -> str:
    """A short digest of a run's identity (program, config, budget, schemas). The task table, the
    fragments and the timeline carry it, so a record copied in from a store of another run, or a root
    `zarr.json` from another run over these records, reads as damage instead of a mixed run."""
    return hashlib.sha256(canonical_json(dict(identity)).encode()).hexdigest()[:32]


def check_run_tag(attrs: Mapping[str, Any], tag: str, file: Path) -> None:
    """StoreDamaged naming `file` unless the record `attrs` was written for the run tagged `tag`."""
    stored = attrs.get(RUN_KEY)
    if stored != tag:
        raise damaged(
            file,
            f"written for another run (run tag {str(stored)[:12]!r}) than the root zarr.json's identity "
            f"(run tag {tag[:12]!r})",
        )


def normalize(value: Any, what: str) -> Any:
    """`value` as plain JSON types (tuples → lists, int keys → str); ValueError if it is not JSON-able."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from None


def _checked_text(attrs: Mapping[str, Any]) -> str:
    """The canonical text of `attrs` without their checksum: what the checksum is taken over."""
    return canonical_json({k: v for k, v in attrs.items() if k != CRC_KEY})


def _text_crc(text: str, key: str) -> int:
    """The CRC-32 of `key` followed by `text`."""
    return zlib.crc32(text.encode(), zlib.crc32(key.encode()))


def _crc(attrs: Mapping[str, Any], key: str) -> int:
    return _text_crc(_checked_text(attrs), key)


def seal(attrs: Mapping[str, Any], key: str = "") -> JsonObject:
    """`attrs` (already normalised) plus their checksum, for the store whose id is `key`."""
    out = dict(attrs)
    out[CRC_KEY] = _crc(attrs, key)
    return out


def unseal(attrs: Mapping[str, Any], file: Path, key: str = "") -> JsonObject:
    """The attributes without the checksum; StoreDamaged naming `file` if it is missing or wrong for
    the store whose id is `key`."""
    if attrs.get(CRC_KEY) != _crc(attrs, key):
        raise damaged(file, "checksum mismatch (the record was altered, truncated or copied from another store)")
    return {k: v for k, v in attrs.items() if k != CRC_KEY}


def metadata_file(root: Path, path: str) -> Path:
    return root / path / "zarr.json" if path else root / "zarr.json"


async def read_record(store: Store, root: Path, path: str) -> JsonObject | None:
    """The unsealed record at `path`, None if there is none; StoreDamaged if it cannot be trusted
    (its checksum taken with the store's id where `store` is a run store's `AtomicLocalStore`)."""
    file = metadata_file(root, path)
    if not file.is_file():
        return None
    try:
        group = await zasync.open_group(store=store, path=path, mode="r", zarr_format=3, use_consolidated=False)
        attrs = dict(group.attrs)
    except StoreError:
        raise
    except Exception as exc:
        raise damaged(file, exc) from None
    return unseal(attrs, file, store.seal_key if isinstance(store, AtomicLocalStore) else "")


def write_record(store: AtomicLocalStore, path: str, attrs: Mapping[str, Any]) -> None:
    """Write the record group at `path` (creating missing parent groups); `attrs` must be normalised.

    The group's `zarr.json` is serialised as zarr's `GroupMetadata` would and written as one atomic
    file, without a round trip through zarr's event loop (about 1 ms each on a local disk)."""
    if store.read_only:
        raise StoreError(f"run store {store.root} is open read-only")
    parts = path.split("/") if path else []
    for i in range(len(parts)):
        parent = metadata_file(store.root, "/".join(parts[:i]))
        if not parent.is_file():
            with contextlib.suppress(FileExistsError):
                write_atomic(parent, _group_json({}), exclusive=True, durable=store.durable)
    write_atomic(metadata_file(store.root, path), sealed_group_json(attrs, store.seal_key), durable=store.durable)


def _group_json(attrs: Mapping[str, Any]) -> bytes:
    """The `zarr.json` of a group with these attributes: the document zarr's `GroupMetadata` writes
    (tests compare the two), but without its deep copy of the attributes (`dataclasses.asdict`) and
    its indentation, which keeps `json` off its C encoder. The driver writes the run's timeline and
    every task batch's record this way; 600 progress samples cost 38 ms a write through zarr."""
    meta = {"attributes": attrs, "zarr_format": 3, "node_type": "group"}
    return json.dumps(meta, allow_nan=True).encode()


def sealed_group_json(attrs: Mapping[str, Any], key: str = "") -> bytes:
    """`_group_json(seal(attrs, key))` in one encoding pass: the canonical text the checksum is taken over
    is also the text the file holds, with the checksum spliced in as the last key. The driver writes
    the run's timeline (up to 600 progress samples) this way, and each pass over it costs it about
    5 ms."""
    text = _checked_text(attrs)
    sealed = f'{text[:-1]}{"," if text != "{}" else ""}"{CRC_KEY}":{_text_crc(text, key)}}}'
    return f'{{"attributes":{sealed},"zarr_format":3,"node_type":"group"}}'.encode()


def record_names(root: Path, path: str) -> list[str]:
    """Sorted names of the record groups directly under `path` (directories holding a zarr.json).

    A directory without one is a record whose write a crash interrupted before its only file was
    renamed into place: it never existed, so it is skipped."""
    base = root / path
    if not base.is_dir():
        return []
    return sorted(e.name for e in base.iterdir() if not e.name.startswith(".") and (e / "zarr.json").is_file())
