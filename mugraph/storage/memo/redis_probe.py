"""A redis-server looked at from outside, with no client library: one command over its unix socket,
PING, the pid in its pidfile, whether a process is a redis-server of a given directory, its log's tail."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def send(sock_path: str, args: list[str], timeout: float) -> bytes:
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


def answers_plain(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a server at host:port answers an inline PING in Redis's plain protocol: told apart from a
    TLS server (which closes on, or does not answer, bytes that are not a handshake), so a `rediss://`
    URL naming a server without TLS is said to be that, rather than a server that cannot be reached."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH", b"-ERR", b"-WRONGPASS"))


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def our_server(pid: int, data_dir: Path) -> str | None:
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


def ping(sock_path: str, timeout: float = 0.5) -> bool:
    try:
        return send(sock_path, ["PING"], timeout).startswith(b"+PONG")
    except OSError:
        return False


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join("    " + line for line in tail) if tail else "(empty log)"
