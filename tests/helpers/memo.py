"""Memo test helpers: verdict stand-ins, key names, process checks, and the functions spawned worker
processes run (importable by name from the children)."""

from __future__ import annotations

import os
import time

from mugraph.storage.memo.layered import LayeredMemo
from mugraph.storage.memo.redis_backend import RedisMemo
from mugraph.storage.processes import pid_alive

VALID = frozenset({b"Y", b"N", b"U"})


def verdict(key: str) -> bytes:
    """A deterministic stand-in for a Z3 verdict."""
    return (b"Y", b"N", b"U")[sum(key.encode()) % 3]


def keys(n: int, prefix: str = "smt:test") -> list[str]:
    return [f"{prefix}:{i:06d}" for i in range(n)]


def wait_dead(pid: int, timeout: float = 5.0) -> bool:
    """True once `pid` is gone (or a zombie) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def worker_store(url: str, names: list[str]) -> tuple[int, dict[str, int | float]]:
    """In a worker process: compute and store the verdicts of `names`; (pid, counters)."""
    memo = LayeredMemo(RedisMemo(url), valid_values=VALID)
    found = memo.lookup(names)
    memo.store({k: verdict(k) for k, v in zip(names, found, strict=True) if v is None})
    memo.close()
    return os.getpid(), memo.counters.as_dict()


def worker_lookup(url: str, names: list[str]) -> tuple[int, list[bytes | None], dict[str, int | float]]:
    """In a worker process: look `names` up; (pid, values, counters)."""
    memo = LayeredMemo(RedisMemo(url), valid_values=VALID)
    found = memo.lookup(names)
    memo.close()
    return os.getpid(), found, memo.counters.as_dict()
