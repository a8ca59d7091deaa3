"""Python's cyclic collector paused while the search walks, and what it leaves alive frozen.

The walk makes no cycles, but it makes acyclic records in bursts (a block node's rows, each with
its tables), and the collector, woken by every 700 of them, rescanned the worker's caches thousands
of times a task (half of a warm gated_mlp search's time); re-enabled as it was, it scanned all that
a task left alive on the first allocation after it (40% of a lora run's time). Reference counting
frees everything the walk drops, frozen or not, and an occasional full collection frees any cycle
the rest of the process makes: once a minute at most, and no more than 2% of the time, judged by its
cost. A full collection passes over every object the process holds (lora's worker, with caches sized
by its memory, holds 17 million: 9.9 s), so its cost is estimated before it runs, from the memory
blocks allocated, and it waits until it fits in 2% of the time since the last one.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FULL_COLLECTION_SECONDS", "FULL_COLLECTION_SHARE", "SECONDS_PER_BLOCK", "collector_paused"]

# How often a paused collector gets one full collection (see `collector_paused`): at most once a
# minute, and at most 2% of the time.
FULL_COLLECTION_SECONDS = 60.0
FULL_COLLECTION_SHARE = 0.02
# What a full collection costs per allocated memory block (`sys.getallocatedblocks`, which counts
# them in microseconds) until one has been timed in this process: 440 ns on a lora searcher's 12.8 M
# blocks (5.6 s), 620 ns on a gqa searcher's 1.25 M (0.8 s).
SECONDS_PER_BLOCK = 6e-7
_since = time.monotonic()  # when the last full collection ended (or this module was loaded)
_next_full = _since + FULL_COLLECTION_SECONDS  # when to look at the cost again
_per_block = SECONDS_PER_BLOCK


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off while a walk runs, and what the walk leaves alive frozen (left
    out of later collections) when it ends; now and then (at most once a minute, and only where its
    estimated cost is at most 2% of the time since the last one), the collector unfreezes and
    collects everything, so cycles that anything in the process makes are still freed."""
    global _next_full, _per_block, _since
    if not gc.isenabled():  # the caller runs its own policy
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if (now := time.monotonic()) >= _next_full:
            blocks = sys.getallocatedblocks()
            due = _since + max(FULL_COLLECTION_SECONDS, _per_block * blocks / FULL_COLLECTION_SHARE)
            if now < due:  # it would cost more than its share of the time since the last one
                _next_full = due
            else:
                gc.unfreeze()
                gc.collect()
                _since = time.monotonic()
                took = _since - now
                _per_block = took / max(1, blocks)
                _next_full = _since + max(FULL_COLLECTION_SECONDS, took / FULL_COLLECTION_SHARE)
        gc.freeze()
        gc.enable()
