"""Checks of a run's options that run before anything is created (store, memo server, cluster): each
failure is a MugraphError, so one line on stderr and exit status 2 from the command line, and one
exception naming the option from `mugraph.optimize`."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import tempfile
from pathlib import Path

from mugraph.ir.errors import MugraphError
from mugraph.storage.run.errors import store_root
from mugraph.storage.run.root import SIBLING_EXTRA

_HOST_PORT = re.compile(r"(?:(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]*):)?(?P<port>\d+)")
_SCHEDULER = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx)://)?" + _HOST_PORT.pattern)
WORKERS_PER_CORE_WARNING = 2
WORKERS_PER_CORE_LIMIT = 8


def check_host_port(text: str, option: str, *, scheduler: bool = False, none: str | None = None) -> None:
    """`HOST:PORT` or `PORT` (no HOST: all interfaces), or for a scheduler `[tcp://]HOST:PORT`; `none`,
    where given, is how the caller says "no address" (the message offers it)."""
    m = (_SCHEDULER if scheduler else _HOST_PORT).fullmatch(text.strip())
    nor = f", nor {none} (no dashboard)" if none else ""
    example = "tcp://HOST:8786" if scheduler else f"127.0.0.1:8787 or :0{nor}"
    if m is None or (scheduler and not m["host"]):
        raise MugraphError(f"{option} {text!r} is not an address such as {example}")
    if int(m["port"]) > 65535:
        raise MugraphError(f"{option} {text!r}: port {m['port']} is above 65535")


def given(option: str, value: object, *, quoted: bool = False) -> str:
    """An option and its value as a message names them: `--store runs/x.zarr` for the command line,
    `store='runs/x.zarr'` for a library call (an `option` ending in "=")."""
    if option.endswith("="):
        return f"{option}{str(value)!r}"
    return f"{option} {value!r}" if quoted else f"{option} {value}"


def _probe_dir(directory: Path, option: str, target: Path) -> None:
    """Fail unless a file can be created in `directory` (tried for real: permissions, read-only mounts)."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".mugraph-probe-")
    except OSError as e:
        raise MugraphError(f"{given(option, target)}: cannot write in {directory} ({e.strerror or e})") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)


def _nearest_existing(path: Path, option: str) -> Path:
    """The nearest existing ancestor of `path`, which must be a directory."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise MugraphError(f"{given(option, path)}: {parent} is a file, not a directory")
            return parent
    raise MugraphError(f"{given(option, path)}: no existing directory above it")


def check_store_name(text: str, option: str = "--store") -> Path:
    """A run store path with a name of its own: the memo directory (NAME.memo) and the report
    (NAME.html) go beside the store, named after it, so `/`, `.` and `..` cannot be stores."""
    if not text.strip():
        raise MugraphError(f"{option} is empty; give a path such as runs/my-run.zarr")
    path = Path(text)
    if path.name in ("", ".", ".."):
        raise MugraphError(
            f"{given(option, text, quoted=True)} names no directory of its own (the memo directory and the report go "
            "beside the store, named after it); give a path such as runs/my-run.zarr"
        )
    return path


def check_store_path(text: str, option: str = "--store") -> Path:
    """A run store path that can be created (or exists as a directory). Whether it can be written is
    `check_store_writable`'s, asked only once the run must write (a finished store is read back)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise MugraphError(
            f"{given(option, text, quoted=True)} contains a control character (newline, tab, ...); "
            "the memo directory next to the store could not be found again"
        )
    path = check_store_name(text, option)
    directory = _nearest_existing(path, option)
    name_max = _name_max(directory)
    _check_name_length(path, option, name_max, 0)  # a name the filesystem refuses cannot even be looked up
    if path.exists():
        if not path.is_dir():
            raise MugraphError(f"{given(option, path)} is a file, not a run store directory")
        return path
    _check_name_length(path, option, name_max, SIBLING_EXTRA)
    return path


def check_store_writable(path: Path, option: str, why: str) -> None:
    """Fail unless the run can write its store and what goes beside it (the memo directory, the
    report): the directory above an existing store, else the nearest existing one. An existing store
    is written to for `why` (a phrase), which the refusal gives."""
    if not path.exists():
        _probe_dir(_nearest_existing(path, option), option, path)
        return
    try:
        _probe_dir(path.parent if path.parent.exists() else path, option, path)
    except MugraphError as e:
        raise MugraphError(f"{e}; {why}, so copy the store somewhere writable and run on the copy") from None


def _name_max(directory: Path) -> int:
    """The longest file name, in bytes, the filesystem of `directory` allows (255 where it does not say)."""
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _check_name_length(path: Path, option: str, name_max: int, extra: int) -> None:
    """Refuse a store whose name, `extra` bytes longer (the store is built beside its path, under a longer
    name, then renamed into place), is longer than the filesystem allows."""
    size = len(os.fsencode(path.name))
    if size + extra <= name_max:
        return
    built = f", and the store is first built beside it under a name {extra} bytes longer" if extra else ""
    raise MugraphError(
        f"{given(option, path)}: the name is too long ({size} bytes{built}; this filesystem allows {name_max} "
        f"bytes in a name); give a name of at most {name_max - SIBLING_EXTRA} bytes"
    )


def check_output_file(path: Path, option: str, mark: str | None = None) -> Path:
    """A file the command will write at the end: its directory must exist and be writable now, it is
    not inside a run store (whose records it would replace), and where `mark` is given, a file already
    there is replaced only if `mark` is in its first 4 KB (one this command wrote before: a report's
    title), never a file of the user's."""
    if not str(path).strip() or path.name in ("", ".", ".."):
        raise MugraphError(f"{option} is empty; give a file name")
    if path.is_dir():
        raise MugraphError(f"{option} {path} is a directory, not a file")
    parent = path.absolute().parent
    root = store_root(parent)
    if root is not None:
        raise MugraphError(
            f"{option} {path} is inside the run store {root}, whose records it would replace; choose a file outside it"
        )
    if mark is not None and path.exists() and mark not in _head(path):
        raise MugraphError(
            f"{option} {path} exists and is not a file this command wrote; it will not replace it: "
            "choose another file, or move it away"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise MugraphError(f"{option} {path}: the file is not writable")
    if not parent.is_dir():
        _nearest_existing(path, option)
        raise MugraphError(f"{option} {path}: the directory {parent} does not exist")
    _probe_dir(parent, option, path)
    return path


def _head(path: Path) -> str:
    """The first 4 KB of a file as text ("" where it cannot be read)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(4096)
    except OSError:
        return ""


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the OS says), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def max_workers() -> int:
    """The most worker processes a local cluster may have: a search task keeps a core busy, so more
    than a few per core only adds processes (each with its own solver, memo connection and memory)
    that wait for a core, and a run of thousands never gets its cluster started."""
    return WORKERS_PER_CORE_LIMIT * usable_cores()


def check_workers(workers: int | None) -> None:
    """Refuse a --workers above `max_workers()`; warn, in one line, above twice the cores."""
    if workers is None:
        return
    cores = usable_cores()
    if workers > max_workers():
        raise MugraphError(
            f"--workers {workers} is more than {WORKERS_PER_CORE_LIMIT} per core of this machine's {cores} "
            f"(at most {max_workers()}); a search task keeps a core busy, so give at most that, or run "
            "on a larger cluster with --scheduler"
        )
    if workers > WORKERS_PER_CORE_WARNING * cores:
        print(
            f"mugraph: warning: --workers {workers} is far above the {cores} cores of this machine; "
            "each worker is a process with its own solver and memo",
            file=sys.stderr,
            flush=True,
        )


def file_name(name: str) -> str:
    """A program name made safe as part of a file name in runs/: no directories, no hidden or empty names."""
    safe = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("._")
    return safe[:64] or "program"


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `15m`, `2h` or `1h30m`."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    total, num = 0.0, ""
    try:
        for ch in text.strip().lower():
            if ch.isdigit() or ch == ".":
                num += ch
            elif ch in units and num:
                total += float(num) * units[ch]
                num = ""
            else:
                raise ValueError
        total += float(num) if num else 0.0
    except ValueError:
        raise MugraphError(f"time limit {text!r} is not a duration such as 90, 90s, 15m or 2h") from None
    if total <= 0:
        raise MugraphError(f"time limit {text!r}: the duration must be positive")
    return total


def check_dashboard_host(address: str, option: str = "--dashboard-address") -> None:
    """The dashboard's host must be one of this machine's: resolved and bindable now, not when the
    cluster starts (after the store and the memo server exist)."""
    host = address.strip().rpartition(":")[0].strip("[]")
    if not host:
        return  # the loopback interface (see pipeline.cluster.local_dashboard)
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise MugraphError(f"{option} {address!r}: cannot resolve the host {host!r} ({reason})") from None
    family, _, _, _, sockaddr = infos[0]
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((sockaddr[0], 0))
    except OSError as e:
        raise MugraphError(
            f"{option} {address!r}: cannot listen on {host!r} ({e.strerror or e}); give an "
            "address of this machine, such as 127.0.0.1:8787"
        ) from None


def check_memo_secret(memo_dir: Path) -> None:
    """The run's memo secret, where one exists already ($MUGRAPH_MEMO_KEY or MEMO_DIR/memo.key), must be
    readable text before the store is made; a missing one is made later, with the memo server."""
    from mugraph.storage.memo.auth import ENV_SECRET, KEY_FILE, load_secret

    if os.environ.get(ENV_SECRET) or (memo_dir / KEY_FILE).is_file():
        load_secret(memo_dir)
