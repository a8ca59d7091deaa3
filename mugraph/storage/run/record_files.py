"""Reading a run store's sealed JSON records as files: one record, every record under a group, a
field of the type its readers index it as, the records named by a μGraph's digest (checked to be
about that μGraph), and the store's size. `RunStore` holds one; what it reads is damage-checked
here (StoreDamaged naming the file), what it means is checked there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from zarr.core.sync import sync as zarr_sync

from mugraph.storage.run.atomic_store import AtomicLocalStore
from mugraph.storage.run.errors import StoreError, damaged
from mugraph.storage.run.records import metadata_file, read_record, record_names, unseal
from mugraph.storage.run.run_records import JsonObject
from mugraph.storage.safe_files import read_nofollow

__all__ = ["RecordFiles"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run one of zarr's coroutines on its event loop."""
    return zarr_sync(coro)


class RecordFiles:
    """The records of the store at `root`, read through `store`."""

    def __init__(self, store: AtomicLocalStore, root: Path) -> None:
        self.store = store
        self.root = root

    def read(self, path: str) -> JsonObject | None:
        """The unsealed record at `path`, None if there is none."""
        return run_sync(read_record(self.store, self.root, path))

    def read_all(self, base: str) -> list[tuple[str, JsonObject | None]]:
        """(name, attributes) of every record directly under `base`, by name."""
        names = record_names(self.root, base)

        async def read() -> list[JsonObject | None]:
            return await asyncio.gather(*(read_record(self.store, self.root, f"{base}/{n}") for n in names))

        return list(zip(names, run_sync(read()), strict=True))

    def field(self, path: str, attrs: Mapping[str, Any] | None, key: str, kind: type[T]) -> T:
        """`attrs[key]`, which must be a `kind`; StoreDamaged naming the record's file otherwise."""
        value = (attrs or {}).get(key)
        if not isinstance(value, kind):
            raise damaged(metadata_file(self.root, path), f"{key} is not a {kind.__name__}")
        return value

    def keyed(self, base: str) -> dict[str, tuple[JsonObject, Path]]:
        """digest → (the record's `result`, its file) of every record under `base` (`<kind>/<fragment>`).

        A record is named by the digest of its μGraph and says which μGraph it is about: one whose
        `digest` is another's (two records swapped, one copied over another) is damage."""
        return {d: self.keyed_result(base, d, attrs) for d, attrs in self.read_all(base)}

    def keyed_result(self, base: str, d: str, attrs: Mapping[str, Any] | None) -> tuple[JsonObject, Path]:
        """The `result` of the record `d` under `base` read as `attrs`, and its file; StoreDamaged
        naming the file unless it is an object about the μGraph `d`."""
        file = metadata_file(self.root, f"{base}/{d}")
        result = self.field(f"{base}/{d}", attrs, "result", dict)
        if result.get("digest") != d:
            raise damaged(
                file, f"holds the record of μGraph {str(result.get('digest'))[:16]!r}, not of {d[:16]}, its name"
            )
        return result, file

    def check_keyed_names(self, base: str) -> None:
        """At open: every record under `base` is about the μGraph that names it. Each file is read as
        plain JSON (about 20 μs, against 1 ms through zarr's event loop), since every open of a store
        with thousands of μGraphs pays for it."""
        for d in record_names(self.root, base):
            file = metadata_file(self.root, f"{base}/{d}")
            try:
                attrs = unseal(json.loads(read_nofollow(file))["attributes"], file, self.store.seal_key)
                about = attrs["result"]["digest"]
            except StoreError:
                raise
            except FileNotFoundError:
                continue  # listed a moment ago and gone: the ledger and cross-checks say whether it matters
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise damaged(file, exc) from None
            if about != d:
                raise damaged(file, f"holds the record of μGraph {str(about)[:16]!r}, not of {d[:16]}, its name")

    def size_bytes(self) -> int:
        """Bytes of all files of the store on disk."""
        total = 0
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                with contextlib.suppress(FileNotFoundError):  # a temp file renamed meanwhile
                    total += (Path(dirpath) / name).stat().st_size
        return total
