"""The Zarr run store and the verdict memo backends (issues 3, 5).

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

__all__ = [
    "EmbeddedRedis",
    "LayeredMemo",
    "LocalMemo",
    "MemoCounters",
    "MemoStore",
    "MemoUnavailable",
    "find_redis_server",
    "open_memo_store",
]
