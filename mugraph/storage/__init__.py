"""The only package that knows Zarr and Redis, in two families that share only `safe_files` and `processes`:

- `storage.run`: the run store, one search's record of truth (a Zarr v3 directory the driver alone
  writes: task table, found μGraphs, confirmations, layouts, ledger), the protocol every run-store
  backend follows (`RunStoreReader`, `RunStoreWriter`), and its errors;
- `storage.memo`: the verdict memo, a per-process LRU (`LayeredMemo`) in front of a shared backend
  (`RedisMemo`, imported on demand by `open_memo_store`, or `LocalMemo`), the private redis-server a
  run starts (`EmbeddedRedis`), and the memo URL, session and value signing."""

from mugraph.storage.memo.layered import (
    LayeredMemo,
    LocalMemo,
    MemoCounters,
    MemoStore,
    MemoUnavailable,
    open_memo_store,
)
from mugraph.storage.memo.redis_binary import find_redis_server
from mugraph.storage.memo.redis_server import EmbeddedRedis
from mugraph.storage.run.errors import StoreBusy, StoreDamaged, StoreError, StoreMismatch
from mugraph.storage.run.protocol import RunStoreReader, RunStoreWriter
from mugraph.storage.run.store import FoundRecord, RunStore, TaskRecord

__all__ = [
    "EmbeddedRedis",
    "FoundRecord",
    "LayeredMemo",
    "LocalMemo",
    "MemoCounters",
    "MemoStore",
    "MemoUnavailable",
    "RunStore",
    "RunStoreReader",
    "RunStoreWriter",
    "StoreBusy",
    "StoreDamaged",
    "StoreError",
    "StoreMismatch",
    "TaskRecord",
    "find_redis_server",
    "open_memo_store",
]
