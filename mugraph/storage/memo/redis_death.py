"""Why mugraph's own redis-server died in the middle of a run, in words a user can act on.

A worker whose memo server went away sees only "Connection refused". The process that started the
server holds its exit status, its log and its data directory, and the limits it passed down: a server
killed by SIGXFSZ wrote a file past the file size limit (`ulimit -f`) the command was started under,
and dies without a word in its log; one killed by SIGKILL was most often the kernel's out-of-memory
killer's; one that exited says why in the last warning of its log.
"""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

from mugraph.storage.memo.redis_files import DATA_FILES, LOG_NAME

__all__ = ["death_words"]

# what to do once the server is gone: the run goes on without it, and a new run starts a new one
AFTERWARDS = (
    "the run goes on with each worker's local memo (the same results, found more slowly); the next run "
    "starts the server again"
)


def death_words(pid: int, returncode: int, data_dir: Path, log_reason: str) -> str:
    """One line: mugraph's own server died, why (its exit, what its files and limits say), what to do.
    `returncode` is Popen's (negative: the signal that killed it); `log_reason` the last warning of
    its log."""
    who = f"mugraph's own Redis server (pid {pid}, data in {data_dir}) died"
    log = data_dir / LOG_NAME
    if returncode >= 0:
        return f"{who}: it exited with status {returncode} ({log_reason}; its log: {log}); {AFTERWARDS}"
    signum = -returncode
    name = _signal_name(signum)
    if signum == getattr(signal, "SIGXFSZ", None):
        return f"{who}: killed by {name}, {_file_size_limit(data_dir)}; {AFTERWARDS}"
    if signum == signal.SIGKILL:
        return (
            f"{who}: killed by {name} (most often the kernel's out-of-memory killer: `dmesg` says; give "
            f"the run more memory or fewer --workers); {AFTERWARDS}"
        )
    return f"{who}: killed by {name} (sent by another process, or a fault of redis-server: {log} may say); {AFTERWARDS}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _file_size_limit(data_dir: Path) -> str:
    """What a SIGXFSZ means here: the file size limit this process (and so the server) runs under, and
    the data file that reached it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = "unlimited now" if soft == resource.RLIM_INFINITY else f"{soft:,} bytes"
    sizes = []
    for name in DATA_FILES:
        path = data_dir / name
        if path.is_file():
            sizes.append((path.stat().st_size, name))
        elif path.is_dir():
            sizes += [(entry.stat().st_size, f"{name}/{entry.name}") for entry in os.scandir(path) if entry.is_file()]
    grown = f": {max(sizes)[1]} holds {max(sizes)[0]:,} bytes" if sizes else ""
    return (
        f"a file it wrote grew past the file size limit the command runs under (`ulimit -f`, {limit}){grown}; "
        "run mugraph under a larger limit (`ulimit -f unlimited`) to keep the memo's verdicts"
    )
