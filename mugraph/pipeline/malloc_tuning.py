"""The malloc environment of worker processes a LocalCluster starts.

Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536 (to hand freed memory back to the
OS). Setting any malloc threshold turns off glibc's dynamic mmap threshold, so every allocation
of 128 KiB or more becomes its own mmap and munmap, and the fingerprints' temporary arrays fault
their pages in again on every use. A LocalCluster made by mugraph does not set the variable
(`SPAWN_ENVIRON_OVERRIDES`). The thresholds a fresh Z3 context per query needs are set by the prune
stage itself, in every process that runs queries, whatever the environment (stages/prune/heap.py).
"""

from __future__ import annotations

# dask config keys under distributed.nanny.pre-spawn-environ; None unsets one
SPAWN_ENVIRON_OVERRIDES: dict[str, object] = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
