"""torch.export, and torch.export.load, one call at a time and without their own prints.

Both keep process-wide state while they run (a proxy mode slot, the current deserializer): two
threads capturing at once failed with torch's assertions. And both print and log their refusals
before raising, where the error says it once. A library must not take the process's streams, or its log, away
from its other threads for that: the writes and log records of the capturing thread alone are dropped.

The stream put in place is never freed: Python 3.11's `print` holds `sys.stdout` as a borrowed
reference while it writes, so a stream replaced and freed under another thread's print crashed the
process (a segfault in a host thread printing beside a capture).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO, cast

_ONE_AT_A_TIME = threading.RLock()


class _MutedFor:
    """A text stream that drops what one thread writes and passes the others' writes on."""

    def __init__(self, under: TextIO) -> None:
        self._under = under
        self.thread: int | None = None

    def write(self, text: str) -> int:
        if threading.get_ident() == self.thread:
            return len(text)
        return self._under.write(text)

    def flush(self) -> None:
        if threading.get_ident() != self.thread:
            self._under.flush()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty...: the stream's own
        return getattr(self._under, name)


# one muting stream per stream it stands for, kept for the process's life (see above)
_KEPT: dict[int, tuple[TextIO, _MutedFor]] = {}


def _muted(stream: TextIO | None) -> _MutedFor | None:
    """The muting stand-in for `stream`, muting this thread (None, as under pythonw, stays None)."""
    if stream is None:
        return None
    kept = _KEPT.get(id(stream))
    if kept is None or kept[0] is not stream:
        kept = _KEPT[id(stream)] = (stream, _MutedFor(stream))
    kept[1].thread = threading.get_ident()
    return kept[1]


class _NotFrom(logging.Filter):
    """Drops the records one thread logs."""

    def __init__(self, thread: int) -> None:
        super().__init__()
        self.thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def _every_handler() -> set[logging.Handler]:
    """The handlers of every logger there is, the root's and the last resort's among them (torch's
    loggers set their own levels and handlers: a filter on each handler reaches all their records)."""
    loggers = [logging.root, *(x for x in logging.root.manager.loggerDict.values() if isinstance(x, logging.Logger))]
    found = {h for x in loggers for h in x.handlers}
    if logging.lastResort is not None:
        found.add(logging.lastResort)
    return found


@contextlib.contextmanager
def _log_muted() -> Iterator[None]:
    """This thread's log records dropped by every handler; the other threads' still logged. Where
    records carry no thread (`logging.logThreads` off), every record is dropped meanwhile."""
    if not logging.logThreads:
        previous = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(previous)
        return
    mute, handlers = _NotFrom(threading.get_ident()), _every_handler()
    for h in handlers:
        h.addFilter(mute)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(mute)


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """Hold the process's one torch.export slot, with this thread's prints and log records dropped."""
    with _ONE_AT_A_TIME, _log_muted():
        out, err = sys.stdout, sys.stderr
        muted_out, muted_err = _muted(out), _muted(err)
        placed_out, placed_err = cast(TextIO, muted_out), cast(TextIO, muted_err)
        sys.stdout, sys.stderr = placed_out, placed_err
        try:
            yield
        finally:
            for muted in (muted_out, muted_err):
                if muted is not None:
                    muted.thread = None
            # put back what was there, unless someone replaced the streams meanwhile (theirs stays)
            if sys.stdout is placed_out:
                sys.stdout = out
            if sys.stderr is placed_err:
                sys.stderr = err
