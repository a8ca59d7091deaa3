"""Embedded redis-servers stop with the process that started them.

Each running server is registered here, and is stopped at interpreter exit (atexit) and on SIGTERM of
the parent when the parent has no SIGTERM handler of its own (one is installed that raises SystemExit,
so `finally` blocks and atexit run). On Linux, a server started from the main thread also gets SIGTERM
from the kernel when its owner dies (`PR_SET_PDEATHSIG`): a `kill -9` of a run whose store is never
resumed leaves no server behind (SIGTERM makes redis shut down as SHUTDOWN does).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Stoppable(Protocol):
    """A registered server: the process that started it (a forked child stops none of its parent's)."""

    owner_pid: int

    def stop(self) -> None: ...


_live: list[Stoppable] = []
_live_lock = threading.Lock()
_hooks_installed = False
_previous_sigterm: Any = None


def death_signal() -> Callable[[], None] | None:
    """A `preexec_fn` that asks the kernel to send the child SIGTERM when its parent dies, where that
    can be asked: on Linux, from the main thread (the signal follows the thread that forked, and only
    the main thread lives as long as the process). The function is looked up before the fork; in the
    child it only calls it, and exits at once if the parent died before the request took hold."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def request() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return request


def _stop_all() -> None:
    with _live_lock:
        servers = [s for s in _live if s.owner_pid == os.getpid()]
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into SystemExit so that `finally` blocks, `with` exits and atexit hooks run.
    raise SystemExit(128 + signum)


def register(server: Stoppable) -> None:
    global _hooks_installed, _previous_sigterm
    with _live_lock:
        _live.append(server)
        if not _hooks_installed:
            atexit.register(_stop_all)
            _hooks_installed = True
        if _previous_sigterm is None and threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGTERM)
            if current is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
                _previous_sigterm = current


def live_servers() -> list[Stoppable]:
    """The servers this process started and has not stopped (some may have died since)."""
    with _live_lock:
        return [s for s in _live if s.owner_pid == os.getpid()]


def unregister(server: Stoppable) -> None:
    global _previous_sigterm
    with _live_lock:
        if server in _live:
            _live.remove(server)
        if not _live and _previous_sigterm is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, _previous_sigterm)
            _previous_sigterm = None
