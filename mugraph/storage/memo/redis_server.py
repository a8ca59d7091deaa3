"""A private redis-server for one run: unix socket only, data kept (AOF) in a directory the caller gives.

    with EmbeddedRedis(run_dir / "memo") as server:
        memo = RedisMemo(server.url)

The binary is the one `redis_binary` finds. The server binds no TCP port; its socket is
`DATA_DIR/redis.sock` (mode 700), or a socket in a short private temporary directory when that path is
too long for AF_UNIX. It persists with an append-only file (`appendfsync everysec`, no RDB snapshots),
so a restart on the same directory reloads the memo; a clean stop (SHUTDOWN) flushes the AOF first.

The server is stopped by `stop()` / leaving the `with` block (also on KeyboardInterrupt), and with its
owner (`redis_lifetime`: at exit, on SIGTERM, by the kernel when the owner dies). The server runs in its
own session, so a terminal's Ctrl-C reaches only the parent, which then stops it cleanly.

One data directory has at most one owner: a lock file (flock) in it is held while the server runs.
What an earlier run left there is dealt with before a new server starts (`redis_leftovers`): a server
whose owner was killed is shut down, and memo data the server cannot load is moved aside, one warning
says where, and the server starts with an empty memo: it is only a cache.

No write follows a symbolic link. The directory is made mode 700; before the server starts, a link in it
(or the directory being one) is refused with one line naming it, since redis-server opens its pidfile and
AOF by name. Its log is not opened by name at all: the server logs to its stdout, which is `redis.log`
opened here without following a link, as are the lock and state files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.auth import MemoDirUnwritable
from mugraph.storage.memo.redis_binary import find_redis_server
from mugraph.storage.memo.redis_death import death_words
from mugraph.storage.memo.redis_files import (
    LOCK_NAME,
    LOG_NAME,
    MAX_SOCKET_PATH,
    PID_NAME,
    SOCKET_NAME,
    STATE_NAME,
    ServerState,
)
from mugraph.storage.memo.redis_leftovers import CORRUPT_DATA, DISK_FULL, clear_stale, move_data_aside
from mugraph.storage.memo.redis_lifetime import death_signal, live_servers, register, unregister
from mugraph.storage.memo.redis_probe import log_tail, ping, send
from mugraph.storage.safe_files import LinkFound, find_link, open_nofollow, write_nofollow

__all__ = ["EmbeddedRedis", "own_server_death"]


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
        self.owner_pid = os.getpid()

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

    def death(self) -> str | None:
        """Why the server died while it should have been running (one line: `redis_death`); None while
        it runs or once stopped."""
        if self._proc is None or self._proc.poll() is None:
            return None
        reason = _ExitedWhileStarting.reason_of(log_tail(self.log_path))
        return death_words(self._proc.pid, self._proc.returncode, self.data_dir, reason)

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
            clear_stale(self.data_dir, self.stop_timeout)
            self._launch(executable)
            try:
                self._wait_ready()
            except _ExitedWhileStarting as exc:
                # The memo is a cache: data the server cannot load is kept aside and the run goes on empty.
                if DISK_FULL.search(exc.log):
                    raise MugraphError(
                        f"no space left on device for the memo in {self.data_dir}; free some space and run the "
                        "same command again"
                    ) from None
                if not CORRUPT_DATA.search(exc.log) or (aside := move_data_aside(self.data_dir)) is None:
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
        unregister(self)

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
            unregister(self)

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
                preexec_fn=death_signal() if self.die_with_owner else None,
            )
        except OSError as exc:
            raise MugraphError(f"cannot run {executable}: {exc}") from exc
        self.owner_pid = os.getpid()
        register(self)
        state["pid"] = self._proc.pid
        self._write_state(state)

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.socket_path is not None
        deadline = time.monotonic() + self.start_timeout
        delay = 0.002
        while True:
            code = self._proc.poll()
            if code is not None:
                tail = log_tail(self.log_path)
                reason = _ExitedWhileStarting.reason_of(tail)
                raise _ExitedWhileStarting(
                    f"redis-server exited with status {code} while starting on {self.data_dir}: {reason} "
                    f"(its log: {self.log_path})",
                    tail,
                )
            if os.path.exists(self.socket_path) and ping(self.socket_path):
                return
            if time.monotonic() > deadline:
                raise MugraphError(
                    f"redis-server did not answer PING within {self.start_timeout:g} s on "
                    f"{self.socket_path}; its log ({self.log_path}) ends with:\n{log_tail(self.log_path)}"
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
                refused = send(self.socket_path, ["SHUTDOWN"], self.stop_timeout).startswith(b"-")
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


def own_server_death(error: str) -> str | None:
    """Why a server this process started died, where `error` (what a memo client said: its socket path
    is in it) is about one of them; None where none of this process's servers has died."""
    for server in live_servers():
        if isinstance(server, EmbeddedRedis) and server.socket_path is not None and server.socket_path in error:
            return server.death()
    return None
