"""glibc's malloc thresholds in worker processes.

Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536 (to hand freed memory back to the
OS). Setting any malloc threshold turns off glibc's dynamic mmap threshold, so every allocation
of 128 KiB or more becomes its own mmap and munmap. A search allocates such blocks all the time:
each Z3 query makes a fresh context (z3_encoding.SubQueries), which then costs about 14 ms
instead of 2 ms, and the fingerprints' temporary arrays fault their pages in again on every use.

A LocalCluster made by mugraph does not set the variable (`SPAWN_ENVIRON_OVERRIDES`); a worker of
an external `dask worker` may have it, so `restore_thresholds` fixes the thresholds at what the
dynamic rule would reach (mmap at 32 MiB, trim at twice that) when the variable is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# dask config keys under distributed.nanny.pre-spawn-environ; None unsets one
SPAWN_ENVIRON_OVERRIDES: dict[str, object] = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
THRESHOLD_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def restore_thresholds() -> bool:
    """If a malloc threshold variable froze glibc's thresholds, set them where the dynamic rule
    would have taken them. True when it changed them; False elsewhere (no such variable, not
    glibc)."""
    if not any(v in os.environ for v in THRESHOLD_VARIABLES):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD))
