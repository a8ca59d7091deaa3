"""The verdict memo: a per-process LRU in front of an optional shared backend.

Z3 subexpression verdicts are deterministic functions of their key (the key digests the memo schema,
the axioms, the Z3 version, the solver limits and both canonical expressions), so any worker may reuse
any other worker's verdict. The memo is only a cache: losing it costs solver time, never correctness.

* `MemoStore` is what a shared backend provides: one batch lookup (`get_many`), one batch first-writer-
  wins store (`put_if_absent`) and an unconditional `replace`, used only to repair values that failed
  validation. Backends: `LocalMemo` here (a dict, for tests and runs without Redis) and
  `mugraph.storage.memo.redis_backend.RedisMemo`.
* `LayeredMemo` is what the prune stage uses: an LRU first, then one backend batch for the misses.
  Backend values outside `valid_values` are never trusted: they are misses, counted and warned about,
  and the next `store` of such a key repairs the backend copy with `replace`. If the backend fails
  (`MemoUnavailable`), one warning is issued and the process carries on with the LRU alone.

This module does not import redis; `open_memo_store` imports the Redis backend only when asked for one.
The backend protocol lives in `memo_base`, which the backends import (not this module).
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from mugraph.ir.plural import noun
from mugraph.storage.memo.base import MAX_VALUE_BYTES, MemoStore, MemoUnavailable, check_items
from mugraph.storage.memo.url import redact_url

__all__ = [
    "DEFAULT_LRU_ENTRIES",
    "MAX_VALUE_BYTES",
    "UNAVAILABLE",
    "LayeredMemo",
    "LocalMemo",
    "MemoCounters",
    "MemoStore",
    "MemoUnavailable",
    "check_items",
    "open_memo_store",
]

DEFAULT_LRU_ENTRIES = 1_000_000
# What a failed backend is reported as: by the process it failed in, or by the driver its counters reach.
UNAVAILABLE = "memo server unavailable, continuing with the local memo"


class LocalMemo(MemoStore):
    """An in-process dict backend, thread-safe. For unit tests and for runs with no Redis."""

    name = "local"

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        with self._lock:
            return [self._data.get(k) for k in keys]

    def put_if_absent(self, items: Mapping[str, bytes]) -> None:
        check_items(items)
        with self._lock:
            for key, value in items.items():
                self._data.setdefault(key, value)

    def replace(self, items: Mapping[str, bytes]) -> None:
        check_items(items)
        with self._lock:
            self._data.update(items)

    def claim(self, keys: Sequence[str], seconds: float) -> list[bool]:
        """Claims matter only between processes; this backend lives in one."""
        return [True] * len(keys)

    def close(self) -> None:
        pass

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


def open_memo_store(url: str, *, socket_timeout: float = 5.0, connect_timeout: float = 5.0) -> MemoStore:
    """The backend named by `url`: `local` (a process-local dict), `redis://…`, `rediss://…`, `unix://…`."""
    if url == "local":
        return LocalMemo()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from mugraph.storage.memo.redis_backend import RedisMemo

        return RedisMemo(url, socket_timeout=socket_timeout, connect_timeout=connect_timeout)
    from mugraph.ir.errors import MugraphError

    raise MugraphError(f"unsupported memo URL {url!r}: use redis://HOST:PORT/DB, unix:///PATH/TO/SOCKET or 'local'")


@dataclass
class MemoCounters:
    """Per-process memo counters. Invariant: lookups == local_hits + remote_hits + misses.

    `garbage` counts backend values that failed validation (each is also a miss); `repaired` the keys
    whose backend copy was then overwritten with a recomputed value; `remote_errors` failed backend
    calls (after the first one the backend is no longer used); `remote_seconds` the wall time spent in
    backend calls; `stores` the keys passed to `LayeredMemo.store`."""

    lookups: int = 0
    local_hits: int = 0
    remote_hits: int = 0
    misses: int = 0
    garbage: int = 0
    repaired: int = 0
    remote_errors: int = 0
    remote_seconds: float = 0.0
    stores: int = 0

    def as_dict(self) -> dict[str, int | float]:
        return asdict(self)


class LayeredMemo:
    """A per-process LRU in front of an optional shared `MemoStore`. Thread-safe.

    `lookup` answers from the LRU first and sends the misses to the backend in one `get_many` batch;
    `store` fills the LRU and sends one `put_if_absent` batch (plus one `replace` batch for keys whose
    backend value was found invalid). Values outside `valid_values` are rejected by `store` (ValueError:
    a caller bug) and ignored when read from the backend. `local_only_values` are kept in the LRU but
    never sent to the backend: pass the verdicts that are not deterministic (for example an `unknown`
    caused by a wall-clock timeout) so that one slow machine cannot poison every other worker.

    A backend failure (`MemoUnavailable`) is counted, kept as `failure` and reported by one warning
    (none where `warn_unavailable` is off: a worker whose driver says it on the same terminal), and the
    backend is not used again by this LayeredMemo; results are unchanged, only slower."""

    def __init__(
        self,
        backend: MemoStore | None = None,
        *,
        valid_values: frozenset[bytes],
        max_entries: int = DEFAULT_LRU_ENTRIES,
        local_only_values: frozenset[bytes] = frozenset(),
        warn_unavailable: bool = True,
    ) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        if not valid_values:
            raise ValueError("valid_values must name at least one verdict")
        if not local_only_values <= valid_values:
            raise ValueError("local_only_values must be a subset of valid_values")
        check_items({str(v): v for v in valid_values})
        self.valid_values = valid_values
        self.local_only_values = local_only_values
        self.max_entries = max_entries
        self.counters = MemoCounters()
        self._backend = backend
        self._lru: OrderedDict[str, bytes] = OrderedDict()
        # Keys whose backend value failed validation, to be overwritten by the next store.
        self._to_repair: set[str] = set()
        self._lock = threading.Lock()
        self._warned_garbage = False
        self._total_said = False  # the values rejected in all, said at the close after a first warning
        self.warn_unavailable = warn_unavailable
        self.failure: str | None = None  # why the backend failed, the first time it did

    @property
    def name(self) -> str:
        return "lru" if self._backend is None else f"lru+{self._backend.name}"

    @property
    def backend(self) -> MemoStore | None:
        """The shared backend still in use; None when there is none or after it failed."""
        return self._backend

    def __len__(self) -> int:
        with self._lock:
            return len(self._lru)

    def _put_lru(self, key: str, value: bytes) -> None:
        # Caller holds the lock.
        self._lru[key] = value
        self._lru.move_to_end(key)
        while len(self._lru) > self.max_entries:
            self._lru.popitem(last=False)

    def _backend_failed(self, backend: MemoStore, exc: MemoUnavailable, seconds: float) -> None:
        with self._lock:
            self.counters.remote_errors += 1
            self.counters.remote_seconds += seconds
            first = self._backend is backend
            if first:
                self._backend = None
                self._to_repair.clear()
                self.failure = redact_url(str(exc))  # carried to the driver's console and --json
        if first and self.warn_unavailable:
            warnings.warn(
                f"{UNAVAILABLE}: {redact_url(str(exc))}",
                RuntimeWarning,
                stacklevel=3,
            )

    def lookup(self, keys: Sequence[str]) -> list[bytes | None]:
        """The verdict of each key, in order; None where neither the LRU nor the backend has a valid one."""
        result: list[bytes | None] = [None] * len(keys)
        missing: dict[str, list[int]] = {}
        with self._lock:
            self.counters.lookups += len(keys)
            for i, key in enumerate(keys):
                value = self._lru.get(key)
                if value is not None:
                    self._lru.move_to_end(key)
                    result[i] = value
                    self.counters.local_hits += 1
                else:
                    missing.setdefault(key, []).append(i)
            backend = self._backend
        if not missing:
            return result
        remote: list[bytes | None] | None = None
        if backend is not None:
            asked = list(missing)
            start = time.perf_counter()
            try:
                remote = backend.get_many(asked)
            except MemoUnavailable as exc:
                self._backend_failed(backend, exc, time.perf_counter() - start)
                remote = None
            else:
                elapsed = time.perf_counter() - start
                if len(remote) != len(asked):
                    raise RuntimeError(
                        f"memo backend {backend.name} answered {len(remote)} values for {len(asked)} keys"
                    )
                with self._lock:
                    self.counters.remote_seconds += elapsed
        garbage: list[tuple[str, bytes]] = []
        with self._lock:
            if remote is not None:
                for (key, positions), value in zip(missing.items(), remote, strict=True):
                    if value is None:
                        self.counters.misses += len(positions)
                    elif value not in self.valid_values:
                        garbage.append((key, value))
                        self.counters.garbage += len(positions)
                        self.counters.misses += len(positions)
                        self._to_repair.add(key)
                    else:
                        self.counters.remote_hits += len(positions)
                        self._put_lru(key, value)
                        for i in positions:
                            result[i] = value
            else:
                self.counters.misses += sum(len(p) for p in missing.values())
            warn = bool(garbage) and not self._warned_garbage
            if warn:
                self._warned_garbage = True
        if warn:
            warnings.warn(self._rejected_first(backend, garbage), RuntimeWarning, stacklevel=2)
        return result

    def _rejected_first(self, backend: MemoStore | None, garbage: list[tuple[str, bytes]]) -> str:
        """The warning at the first lookup that met values failing their check: how many so far, and one
        as the backend holds it (its stored key, its raw value, truncated), where the backend can say."""
        sealed = getattr(backend, "first_untrusted", None)  # a backend that seals its values says which failed
        key, value = sealed or garbage[0]
        why = (
            "fail their check (written without this run's memo key, or altered)"
            if sealed
            else f"are no verdict (one of {sorted(self.valid_values)})"
        )
        with self._lock:
            so_far = self.counters.garbage
        shown = repr(value[:24]) + ("…" if len(value) > 24 else "")
        return (
            f"rejected {so_far:,} memo {noun(so_far, 'value', 'values')} so far from "
            f"{backend.name if backend else '?'} that {why}: e.g. key {key!r} = {shown}; each is solved again "
            "and overwritten, and the total is said at the end"
        )

    def store(self, items: Mapping[str, bytes]) -> None:
        """Remember verdicts: into the LRU, then one backend batch (except `local_only_values`)."""
        if not items:
            return
        for key, value in items.items():
            if value not in self.valid_values:
                raise ValueError(f"memo value {value!r} for key {key!r} is not one of {sorted(self.valid_values)}")
        shared: dict[str, bytes] = {}
        repair: dict[str, bytes] = {}
        with self._lock:
            self.counters.stores += len(items)
            for key, value in items.items():
                self._put_lru(key, value)
                if value in self.local_only_values:
                    continue
                if key in self._to_repair:
                    repair[key] = value
                else:
                    shared[key] = value
            backend = self._backend
        if backend is None or not (shared or repair):
            return
        start = time.perf_counter()
        try:
            if shared:
                backend.put_if_absent(shared)
            if repair:
                backend.replace(repair)
        except MemoUnavailable as exc:
            self._backend_failed(backend, exc, time.perf_counter() - start)
            return
        elapsed = time.perf_counter() - start
        with self._lock:
            self.counters.remote_seconds += elapsed
            self.counters.repaired += len(repair)
            self._to_repair.difference_update(repair)

    def claim(self, keys: Sequence[str], seconds: float = 10.0) -> list[bool]:
        """Claim keys in the backend (see `MemoStore.claim`); with no backend, or once it failed,
        every key is the caller's."""
        backend = self._backend
        if backend is None or not keys:
            return [True] * len(keys)
        start = time.perf_counter()
        try:
            held = backend.claim(keys, seconds)
        except MemoUnavailable as exc:
            self._backend_failed(backend, exc, time.perf_counter() - start)
            return [True] * len(keys)
        with self._lock:
            self.counters.remote_seconds += time.perf_counter() - start
        return held

    def close(self) -> None:
        """Close the backend (if any), saying how many values it rejected in all where it warned of the
        first ones (that warning cannot know the total); the LRU stays usable."""
        with self._lock:
            backend, self._backend = self._backend, None
            total = self.counters.garbage
            say = self._warned_garbage and not self._total_said
            self._total_said = True
        if say:
            warnings.warn(
                f"rejected {total:,} memo values in all from {backend.name if backend else 'the shared memo'} "
                "that failed their check or were no verdict; each was solved again and overwritten",
                RuntimeWarning,
                stacklevel=2,
            )
        if backend is not None:
            backend.close()
