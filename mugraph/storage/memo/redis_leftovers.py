"""What an earlier run left in a memo data directory, dealt with before a new server starts there.

The state file is written before the server starts, and the server writes its pidfile in the
directory, so a server left running by an owner that was killed (`kill -9`) at any instant is found,
verified to be a redis-server running in this directory (never another process), and shut down
(flushing its AOF); stale socket and pid files are removed. Memo data the server cannot load (a corrupt
AOF, manifest or RDB) is moved into `corrupt-<time>/` in the directory: the memo is only a cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
import warnings
from pathlib import Path

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.redis_files import DATA_FILES, PID_NAME, SOCKET_NAME, STATE_NAME
from mugraph.storage.memo.redis_probe import our_server, ping, read_pid, send
from mugraph.storage.processes import pid_alive

# What redis-server logs when it cannot load its AOF, manifest or RDB (and not when a disk is full).
CORRUPT_DATA = re.compile(
    r"(?i)bad file format|invalid|corrupt|checksum|short read|wrong signature|unrecoverable|"
    r"unexpected end of file|can't handle rdb|unknown rdb|bad manifest"
)
DISK_FULL = re.compile(r"(?i)no space left on device")


def clear_stale(data_dir: Path, stop_timeout: float) -> None:
    """Stop a server a killed owner left on `data_dir`; remove stale socket, pid and state files.

    A server is found through the state file (written before the server is started) and through the
    pidfile the server itself writes in the directory, and is acted on only once verified to be a
    redis-server running in this directory (`our_server`); a socket is used for SHUTDOWN only if it is
    this directory's or named on such a server's command line. Nothing else is ever stopped or signalled.
    Its warning is attributed to the caller of the server's `start`."""
    state_path = data_dir / STATE_NAME
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        state = {}
    if not isinstance(state, dict):
        state = {}
    own_socket = str(data_dir / SOCKET_NAME)
    pids = {p for p in (state.get("pid"), read_pid(data_dir / PID_NAME)) if isinstance(p, int) and p > 0}
    ours = {p: cmdline for p in pids if (cmdline := our_server(p, data_dir)) is not None}
    sockets = {own_socket}
    old_socket = state.get("socket")
    if isinstance(old_socket, str) and any(old_socket in c or os.path.basename(old_socket) in c for c in ours.values()):
        sockets.add(old_socket)
    for sock in sorted(sockets):
        if ping(sock):
            warnings.warn(
                f"stopping a redis-server (pid {', '.join(map(str, sorted(ours))) or 'unknown'}) left running "
                f"on {data_dir} by an earlier run whose owner was killed",
                RuntimeWarning,
                stacklevel=3,
            )
            with contextlib.suppress(OSError):
                send(sock, ["SHUTDOWN"], stop_timeout)
    for pid in sorted(ours):
        stop_pid(pid, data_dir, stop_timeout)
    for stale in [*sockets, str(data_dir / PID_NAME)]:  # never a socket that is not ours
        with contextlib.suppress(OSError):
            os.unlink(stale)
    with contextlib.suppress(OSError):
        state_path.unlink()


def stop_pid(pid: int, data_dir: Path, stop_timeout: float) -> None:
    """Wait for our verified server `pid` to exit after SHUTDOWN; then SIGTERM, then SIGKILL."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None and our_server(pid, data_dir) is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + stop_timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not pid_alive(pid):
            return
    raise MugraphError(f"a redis-server (pid {pid}) left by an earlier run still serves {data_dir} and did not stop")


def move_data_aside(data_dir: Path) -> Path | None:
    """Move the memo's data files (AOF, its manifest directory, RDB) into `corrupt-<time>/`; where."""
    found = [data_dir / n for n in DATA_FILES if (data_dir / n).exists()]
    if not found:
        return None
    aside = data_dir / time.strftime("corrupt-%Y%m%dT%H%M%S", time.gmtime())
    n = 0
    while aside.exists():
        n += 1
        aside = aside.with_name(f"{aside.name.split('.')[0]}.{n}")
    aside.mkdir()
    for f in found:
        os.rename(f, aside / f.name)
    return aside
