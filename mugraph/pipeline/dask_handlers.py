"""The level of Dask's own log handlers while local clusters run, held by all of them together.

A LocalCluster's `silence_logs` sets the stream handlers of the `distributed` and `bokeh` loggers to its
level and puts back what it found when it closes. Two clusters up at once in one process (two threads
each optimising) break that: the second finds the level already set and keeps nothing to put back, the
first puts back Dask's INFO when it closes, and the second's nannies, which live in this process, then
log their closing on stderr. Here the first of several clusters sets the level and the last one puts it
back; a cluster started inside finds it set, so its own `silence_logs` changes and restores nothing.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

_ROOTS = ("distributed", "bokeh")
_HELD = threading.Lock()
_holders = 0
_before: list[tuple[logging.Handler, int]] = []


def _stream_handlers() -> list[logging.Handler]:
    return [h for root in _ROOTS for h in logging.getLogger(root).handlers if isinstance(h, logging.StreamHandler)]


@contextlib.contextmanager
def dask_handlers_at(level: int) -> Iterator[None]:
    """Within (and while any other such block of this process is open): Dask's stream handlers at `level`."""
    global _holders
    with _HELD:
        if _holders == 0:
            _before[:] = [(h, h.level) for h in _stream_handlers()]
            for h, _ in _before:
                h.setLevel(level)
        _holders += 1
    try:
        yield
    finally:
        with _HELD:
            _holders -= 1
            if _holders == 0:
                for h, old in _before:
                    h.setLevel(old)
                _before.clear()
