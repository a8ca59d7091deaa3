"""SIGHUP (the terminal the command runs in was closed) stops the command as SIGTERM does: every block
unwinds, the store stays consistent and resumable, one line and exit status 130.

A closed terminal sends SIGHUP to the whole process group. The driver takes it here; the processes a
local cluster starts (its scheduler, workers, multiprocessing's resource tracker) start with SIGHUP
blocked (`pipeline.cluster`), so only the driver hears it and it stops them as after any interrupt.
Kept light: the console entry installs it before the command line's modules are imported."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import termios
import threading
from types import FrameType


def _off_a_gone_terminal() -> None:
    """stdout and stderr, where they are a terminal that hung up, pointed at /dev/null: every write
    to one fails (EIO), which would turn the interrupt's unwinding (a progress line's last newline,
    the command's one line) into an error with a traceback. A pipe or a file is left as it is."""
    for fd in (1, 2):
        try:
            termios.tcgetattr(fd)
        except termios.error as e:
            if e.args[0] == errno.EIO:  # a terminal, hung up (anything else: not a terminal, or closed)
                with contextlib.suppress(OSError):
                    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


def _hung_up(signum: int, frame: FrameType | None) -> None:
    """SIGHUP handed to whatever takes SIGTERM now (the interrupt handler, or a start holding it back);
    taken once, as a closing terminal may send it again."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _off_a_gone_terminal()
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        handler(signal.SIGTERM, frame)
    elif handler == signal.SIG_DFL:  # no handler for SIGTERM: SIGHUP's own default, as before
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGHUP)
    # SIGTERM ignored: an interrupt is already on its way


def take_hangup_as_term() -> None:
    """SIGHUP stops the command as SIGTERM does, unless it is ignored (`nohup`). Main thread only."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGHUP) in (
        signal.SIG_DFL,
        _hung_up,
    ):
        signal.signal(signal.SIGHUP, _hung_up)
