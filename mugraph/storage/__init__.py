"""The only package that knows Zarr and Redis, in two families that share only `safe_files` and `processes`:

- `storage.run`: the run store, one search's record of truth (a Zarr v3 directory the driver alone
  writes: task table, found μGraphs, confirmations, layouts, ledger), the protocol every run-store
  backend follows (`RunStoreReader`, `RunStoreWriter`), and its errors;
- `storage.memo`: the verdict memo, a per-process LRU (`LayeredMemo`) in front of a shared backend
  (`RedisMemo`, imported on demand by `open_memo_store`, or `LocalMemo`), the private redis-server a
  run starts (`EmbeddedRedis`), and the memo URL, session and value signing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as type checkers see them; at run time `__getattr__` imports each
    from mugraph.storage.memo.layered import LayeredMemo as LayeredMemo
    from mugraph.storage.memo.layered import LocalMemo as LocalMemo
    from mugraph.storage.memo.layered import MemoCounters as MemoCounters
    from mugraph.storage.memo.layered import MemoStore as MemoStore
    from mugraph.storage.memo.layered import MemoUnavailable as MemoUnavailable
    from mugraph.storage.memo.layered import open_memo_store as open_memo_store
    from mugraph.storage.memo.redis_binary import find_redis_server as find_redis_server
    from mugraph.storage.memo.redis_server import EmbeddedRedis as EmbeddedRedis
    from mugraph.storage.run.errors import StoreBusy as StoreBusy
    from mugraph.storage.run.errors import StoreDamaged as StoreDamaged
    from mugraph.storage.run.errors import StoreError as StoreError
    from mugraph.storage.run.errors import StoreMismatch as StoreMismatch
    from mugraph.storage.run.protocol import RunStoreReader as RunStoreReader
    from mugraph.storage.run.protocol import RunStoreWriter as RunStoreWriter
    from mugraph.storage.run.store import FoundRecord as FoundRecord
    from mugraph.storage.run.store import RunStore as RunStore
    from mugraph.storage.run.store import TaskRecord as TaskRecord

# Each public name and the module that holds it, imported when first asked for: a worker or a command
# that reads only the memo should not pay for Zarr (a fifth of a second per process) or the other way.
_WHERE = {
    "EmbeddedRedis": "mugraph.storage.memo.redis_server",
    "FoundRecord": "mugraph.storage.run.store",
    "LayeredMemo": "mugraph.storage.memo.layered",
    "LocalMemo": "mugraph.storage.memo.layered",
    "MemoCounters": "mugraph.storage.memo.layered",
    "MemoStore": "mugraph.storage.memo.layered",
    "MemoUnavailable": "mugraph.storage.memo.layered",
    "RunStore": "mugraph.storage.run.store",
    "RunStoreReader": "mugraph.storage.run.protocol",
    "RunStoreWriter": "mugraph.storage.run.protocol",
    "StoreBusy": "mugraph.storage.run.errors",
    "StoreDamaged": "mugraph.storage.run.errors",
    "StoreError": "mugraph.storage.run.errors",
    "StoreMismatch": "mugraph.storage.run.errors",
    "TaskRecord": "mugraph.storage.run.store",
    "find_redis_server": "mugraph.storage.memo.redis_binary",
    "open_memo_store": "mugraph.storage.memo.layered",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
