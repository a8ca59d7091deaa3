"""Python's cyclic collector paused while the search walks, and what it leaves alive frozen.

The walk makes no cycles, but it makes acyclic records in bursts (a block node's rows, each with
its tables), and the collector, woken by every 700 of them, rescanned the worker's caches thousands
of times a task (half of a warm gated_mlp search's time); re-enabled as it was, it scanned all that
a task left alive on the first allocation after it (40% of a lora run's time). Reference counting
frees everything the walk drops, frozen or not, and an occasional full collection frees any cycle
the rest of the process makes: once a minute, or less often where one takes long enough to cost
more than 2% of the time between them.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FULL_COLLECTION_SECONDS", "FULL_COLLECTION_SHARE", "collector_paused"]

# How often a paused collector gets one full collection (see `collector_paused`): at most once a
# minute, and at most 2% of the time.
FULL_COLLECTION_SECONDS = 60.0
FULL_COLLECTION_SHARE = 0.02
_next_full = time.monotonic() + FULL_COLLECTION_SECONDS


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off while a walk runs, and what the walk leaves alive frozen (left
    out of later collections) when it ends; now and then (at most once a minute, at most 2% of the
    time), the collector unfreezes and collects everything, so cycles that anything in the process
    makes are still freed."""
    global _next_full
    if not gc.isenabled():  # the caller runs its own policy
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if (now := time.monotonic()) >= _next_full:
            gc.unfreeze()
            gc.collect()
            took = time.monotonic() - now
            _next_full = now + max(FULL_COLLECTION_SECONDS, took / FULL_COLLECTION_SHARE)
        gc.freeze()
        gc.enable()
