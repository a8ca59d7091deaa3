"""A scheduler lost in the middle of a run (killed, its machine gone): the client logs each failed
reconnection with a traceback and the next result the driver waits on fails with a cancelled future.
What the user needs is one line: the scheduler is gone, and the store keeps what was done, so the same
command resumes once a scheduler is back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from concurrent.futures import CancelledError

from distributed import Client
from distributed.comm.core import CommClosedError

from mugraph.ir.errors import MugraphError

LOST_REASON = "scheduler-connection-lost"  # the reason distributed cancels a client's futures with
_CONNECTION_ERRORS = (CommClosedError, OSError, CancelledError)
_LOGGED_ERRORS = (*_CONNECTION_ERRORS, asyncio.CancelledError)  # a reconnection the client gave up
# The client's reconnections, its batched stream's "Batched Comm Closed" with a traceback, and tornado's
# "Exception in callback" of a task the driver submitted as the scheduler went (CommClosedError).
_CHATTY = ("distributed.client", "distributed.batched", "tornado.application")


class SchedulerLost(MugraphError):
    """The run's Dask scheduler went away; nothing stored is lost."""


class _NoReconnectTracebacks(logging.Filter):
    """Drops the client's log records of a connection that failed, traceback and all (its own and its
    batched stream's), and of its giving up reconnecting ("Failed to reconnect to scheduler after 20.00 seconds")."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _LOGGED_ERRORS) and "reconnect" not in record.getMessage()


def _lost(client: Client, exc: BaseException) -> bool:
    if getattr(exc, "reason", None) == LOST_REASON:
        return True
    return isinstance(exc, _CONNECTION_ERRORS) and client.status != "running"


@contextlib.contextmanager
def scheduler_loss_said(client: Client) -> Iterator[None]:
    """Within: a lost scheduler ends the run with `SchedulerLost`, and the client's reconnection
    tracebacks are not printed (then or later, as the client is closed)."""
    loggers = [logging.getLogger(name) for name in _CHATTY]
    quiet = _NoReconnectTracebacks()
    for logger in loggers:
        logger.addFilter(quiet)
    lost = False
    try:
        yield
    except _CONNECTION_ERRORS as e:
        if not _lost(client, e):
            raise
        lost = True  # the filter stays: the client logs its last failed reconnection when it is closed, later
        address = getattr(client.scheduler, "address", None) or "its address"
        raise SchedulerLost(
            f"lost the Dask scheduler at {address} in the middle of the run; the store keeps every task "
            "done: run the same command again once a scheduler is back"
        ) from None
    finally:
        if not lost:
            for logger in loggers:
                logger.removeFilter(quiet)
