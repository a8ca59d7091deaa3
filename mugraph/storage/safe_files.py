"""Opening files of the run store and the memo directory without ever following a symbolic link.

A link planted where mugraph writes would turn a write into one on its target: the lock's open would
truncate any file the user (or root) may write, Redis would append its log to it. So every file these
directories hold is opened with O_NOFOLLOW (a link fails with ELOOP), files that must be new with
O_EXCL too, and a directory about to be used is first searched for links (`find_link`), since Zarr and
redis-server open their files by name. A link is refused, never removed: the caller reports it as
damage naming it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["LINK_PROBLEM", "LinkFound", "find_link", "open_nofollow", "read_nofollow", "write_nofollow"]

LINK_PROBLEM = "a symbolic link, which mugraph never follows"


class LinkFound(OSError):
    """`path` is a symbolic link (or not a plain file) where mugraph opens a file of its own."""

    def __init__(self, path: Path, problem: str = LINK_PROBLEM) -> None:
        super().__init__(errno.ELOOP, problem, str(path))
        self.path = path
        self.problem = problem


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` of `path` that refuses a symbolic link or anything but a plain file, and, to write,
    a file with a second name (a hard link is written through just like a symbolic one): LinkFound."""
    try:
        # O_NONBLOCK: a FIFO planted in the store must not hang the open (a plain file ignores it)
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise LinkFound(path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LinkFound(path, "not a plain file")
        if st.st_nlink > 1 and flags & (os.O_WRONLY | os.O_RDWR):
            raise LinkFound(path, f"a hard link ({st.st_nlink} names), which mugraph never writes through")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_nofollow(path: Path) -> bytes:
    """The bytes of the plain file `path` (LinkFound if it is a link)."""
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_nofollow(path: Path, data: bytes, *, append: bool = False, mode: int = 0o644) -> None:
    """Write (or append) `data` to `path`, creating it; LinkFound if it is a link."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = open_nofollow(path, flags, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def find_link(root: Path) -> Path | None:
    """The first symbolic link (by path) inside the directory `root`, or None.

    `root` itself may be a link (the user named it); nothing below it may be. Links are not followed,
    so the walk stays inside `root`; it reads directory entries only (no stat per file)."""
    links: list[str] = []
    stack = [os.fspath(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                if entry.is_symlink():
                    links.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return Path(min(links)) if links else None
