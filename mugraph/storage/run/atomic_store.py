"""A Zarr `LocalStore` whose every write is all-or-nothing, so `kill -9` can never tear a file.

Each key is written to a hidden temp file in its own directory and then renamed over the key
(`os.replace`, atomic on POSIX): a reader, or a process reopening after a crash, sees the old file or
the new one, never a mixture. zarr ≥ 3.1.3 does the same internally, but the run store's correctness
rests on it, so it is explicit here rather than an undocumented property of one zarr release. Temp
names end in `TEMP_SUFFIX`; a crash can leave some behind, and `remove_temp_files` deletes them when
the single writer reopens the store. A temp file is created with O_EXCL (never a planted file or link)
and the rename replaces a link at the key's name instead of writing through it. With `durable=True`
the file and its directory are fsynced too (survives power loss, at about a millisecond per write); a
process crash needs no fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Self

from zarr.abc.buffer import Buffer
from zarr.storage import LocalStore

from mugraph.storage.safe_files import open_nofollow

__all__ = ["TEMP_SUFFIX", "AtomicLocalStore", "remove_temp_files", "write_atomic"]

TEMP_SUFFIX = ".mugraph-tmp"


def write_atomic(path: Path, data: bytes | memoryview, *, exclusive: bool = False, durable: bool = False) -> None:
    """Write `data` to `path` via a temp file and a rename. `exclusive`: FileExistsError if it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}"
    # O_EXCL: the temp file is new, never a link or a file planted under its name
    fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)  # fails if `path` exists, unlike a rename
            tmp.unlink()
        else:
            os.replace(tmp, path)
        if durable:
            _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_temp_files(root: Path) -> int:
    """Delete temp files a killed writer left under `root`; how many. Only the lock holder may call it."""
    removed = 0
    for tmp in root.rglob(f".*{TEMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


class AtomicLocalStore(LocalStore):
    """`LocalStore` with `set`, `set_if_not_exists` and `set_sync` replaced by temp-file-and-rename writes.

    `seal_key` is the store's id, which the checksum of every record read or written through it
    covers (`records.seal`; "" for a store made before it had one)."""

    def __init__(self, root: Path | str, *, read_only: bool = False, durable: bool = False, seal_key: str = "") -> None:
        super().__init__(root, read_only=read_only)
        self.durable = durable
        self.seal_key = seal_key

    def with_read_only(self, read_only: bool = False) -> Self:
        return type(self)(self.root, read_only=read_only, durable=self.durable, seal_key=self.seal_key)

    def _prepare(self, key: str, value: Buffer) -> Path:
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"AtomicLocalStore.set(): value must be a zarr Buffer, got {type(value).__name__}")
        return self.root / key

    async def set(self, key: str, value: Buffer) -> None:
        if not self._is_open:
            await self._open()
        path = self._prepare(key, value)
        await asyncio.to_thread(write_atomic, path, value.to_bytes(), durable=self.durable)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if not self._is_open:
            await self._open()
        path = self._prepare(key, value)
        if path.is_file():  # zarr asks this for every parent group on each create; skip the temp file
            return
        with contextlib.suppress(FileExistsError):
            await asyncio.to_thread(write_atomic, path, value.to_bytes(), exclusive=True, durable=self.durable)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._ensure_open_sync()
        write_atomic(self._prepare(key, value), value.to_bytes(), durable=self.durable)
