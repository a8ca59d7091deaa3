"""glibc malloc thresholds under which a fresh Z3 context per query reuses the heap's memory.

Every query gets its own Z3 context (z3_encoding.SubQueries); the context allocates two blocks of
about 8 MiB and frees both when it goes. On rms_norm's serial search, glibc's dynamic thresholds had
settled with the trim threshold just below the two blocks' sum: the heap grew by 8.1 MiB and shrank
by 16.3 MiB in step, query after query, so every context faulted its memory in again (1.05 million
minor page faults, 95% of them in Z3's `ast_manager` constructor, and 3.1 of 17 s in the kernel).
With a variable such as Dask's `MALLOC_TRIM_THRESHOLD_=65536` set, the thresholds are frozen at
their defaults instead and every block is its own mmap, with the same faults.

`keep_context_memory` sets both thresholds once per process, at the most the dynamic rule reaches
on a 64-bit machine: mmap at 32 MiB (glibc's ceiling), trim at twice that. A process then keeps at
most 64 MiB free at the top of its heap; results do not depend on where memory comes from.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_context_memory"]

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

_done: bool | None = None


def keep_context_memory() -> bool:
    """Set the thresholds (once per process); True where they are set, False where this is not
    glibc."""
    global _done
    if _done is None:
        _done = _set_thresholds()
    return _done


def _set_thresholds() -> bool:
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator has no such rule
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
