"""Dask's own log records while a local cluster runs, held to the level its `silence_logs` asks for.

`silence_logs` sets the level of the stream handler Dask gives its `distributed` logger. Dask gives it
one only where the process had no root handler when `distributed` was imported: in a host that set up
logging first (`logging.basicConfig(level=logging.INFO)`), the records of the nannies this process
starts and stops reach the host's root handler instead, a dozen INFO lines per run. There the
`distributed` logger's own level is raised for as long as a local cluster is up (the first of several
runs in one process raises it, the last one puts it back).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

_LOGGER = "distributed"
_HELD = threading.Lock()
_holders = 0
_before = logging.NOTSET


@contextlib.contextmanager
def dask_logs_at(level: int) -> Iterator[None]:
    """Within: Dask's records below `level` dropped, where the host's handlers would take them."""
    global _holders, _before
    logger = logging.getLogger(_LOGGER)
    with _HELD:
        if _holders == 0 and not logger.handlers:  # Dask's own handler is silence_logs' to set
            _before = logger.level
            logger.setLevel(max(level, logger.getEffectiveLevel()))
            _holders = 1
        elif _holders:
            _holders += 1
        held = _holders > 0
    try:
        yield
    finally:
        if held:
            with _HELD:
                _holders -= 1
                if _holders == 0:
                    logger.setLevel(_before)
