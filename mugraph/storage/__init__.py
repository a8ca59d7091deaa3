"""The Zarr run store (`RunStore`) and the verdict memo backends (issues 3, 5).

The only package that knows Zarr and Redis. The memo: `LayeredMemo` (a per-process LRU) in front of a
shared `MemoStore` — `RedisMemo` (`mugraph.storage.redis_memo`, imported on demand by `open_memo_store`)
or `LocalMemo`; `EmbeddedRedis` starts a private redis-server for a run."""

from mugraph.storage.memo import (
    LayeredMemo,
    LocalMemo,
    MemoCounters,
    MemoStore,
    MemoUnavailable,
    open_memo_store,
)
from mugraph.storage.redis_server import EmbeddedRedis, find_redis_server
from mugraph.storage.run_store import FoundRecord, RunStore, TaskRecord
from mugraph.storage.store_errors import StoreBusy, StoreDamaged, StoreError, StoreMismatch

__all__ = [
    "EmbeddedRedis",
    "FoundRecord",
    "LayeredMemo",
    "LocalMemo",
    "MemoCounters",
    "MemoStore",
    "MemoUnavailable",
    "RunStore",
    "StoreBusy",
    "StoreDamaged",
    "StoreError",
    "StoreMismatch",
    "TaskRecord",
    "find_redis_server",
    "open_memo_store",
]
