"""The single-writer lock of a run store: `fcntl.flock` on a file inside the store directory.

flock is released by the kernel when its holder dies, even by `kill -9`, so a stale lock cannot
outlive a crashed writer. Locks belong to open file descriptions, so a second open in the same
process is refused just like one from another process. The holder's pid is written into the file
only for the message a refused opener prints. The lock file is opened without following a symbolic
link (a planted link would have the pid written over its target): a link is reported as damage.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from mugraph.storage.run.errors import LOCK_NAME, StoreBusy, damaged
from mugraph.storage.safe_files import LinkFound, open_nofollow

__all__ = ["LOCK_NAME", "StoreLock", "writer_pid"]


class StoreLock:
    """An exclusive, non-blocking lock on `directory/LOCK_NAME`, held until `release`."""

    def __init__(self, fd: int, directory: Path) -> None:
        self._fd: int | None = fd
        self.directory = directory

    @classmethod
    def acquire(cls, directory: Path, *, record: bool = True) -> StoreLock:
        """Lock `directory` (creating the lock file) or raise StoreBusy naming the holder's pid
        (StoreDamaged if the lock file is a link). `record`: write this process's pid into the file
        (a reader that changes nothing, `repair --dry-run`, leaves the file as it was)."""
        try:
            fd = open_nofollow(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except LinkFound as exc:
            raise damaged(exc.path, exc.problem) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            who = (
                "another run in this process (another thread, or a call not yet returned)"
                if holder == str(os.getpid())
                else f"another mugraph process (pid {holder})"
            )
            raise StoreBusy(
                f"run store {directory} is in use by {who}; wait for it to finish, stop it, or choose another "
                "--store (store=)",
                holder,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if record:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, directory)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __del__(self) -> None:
        self.release()

    def release(self) -> None:
        """Unlock and close. Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def writer_pid(directory: Path) -> int | None:
    """The pid of the process holding `directory`'s lock now, read from the kernel's table of locks
    (/proc/locks, Linux) without taking the lock: a reader that took it, even shared and for an
    instant, would refuse a writer starting then. None where no process holds it, or where the table
    cannot be read (another system)."""
    try:
        st = os.stat(directory / LOCK_NAME, follow_symlinks=False)
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():  # "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF"
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE" and parts[5] == where:
            return int(parts[4]) if parts[4].isdigit() else None
    return None
