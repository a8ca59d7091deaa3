"""glibc malloc thresholds under which a fresh Z3 context per query reuses the heap's memory.

Every query gets its own Z3 context (z3_encoding.SubQueries); the context allocates two blocks of
about 8 MiB and frees both when it goes. Under glibc's dynamic thresholds, freeing the first such
block that was mmapped moves the mmap threshold to just above 8 MiB and the trim threshold to twice
that. The next contexts' blocks then come from the heap, and freeing both leaves slightly more than
the trim threshold free at its top, which glibc gives back to the OS, so the next context faults the
same 16 MiB in again: on rms_norm's serial search, 1.05 million minor page faults and 3.1 s of 17 s in
the kernel. With a variable such as Dask's `MALLOC_TRIM_THRESHOLD_=65536` set, the thresholds are
frozen at their defaults instead and every block is its own mmap, with the same faults.

`keep_context_memory` sets both thresholds once per process, where the dynamic rule would end on a
64-bit machine without the 8 MiB blocks: mmap at glibc's ceiling (32 MiB), trim at twice that. A
process keeps at most that much free memory at the top of its heap; nothing else changes (results
do not depend on where memory comes from).
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
