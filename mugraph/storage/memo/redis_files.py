"""The files of an embedded redis-server's data directory, named once for the server and for whoever
finds what an earlier run left there."""

from __future__ import annotations

from typing import TypedDict

# sun_path is 108 bytes on Linux (104 on macOS); keep a margin.
MAX_SOCKET_PATH = 100
SOCKET_NAME = "redis.sock"
LOG_NAME = "redis.log"
STATE_NAME = "embedded-redis.json"
LOCK_NAME = "embedded-redis.lock"
PID_NAME = "redis.pid"
# The memo's data: AOF (one file before Redis 7, a directory with a manifest since), RDB.
DATA_FILES = ("appendonly.aof", "appendonlydir", "dump.rdb")


class ServerState(TypedDict):
    """The data directory's state file, written before the server starts so that a killed owner's
    server is found again: its pid (once started), socket, executable and owner process."""

    pid: int | None
    socket: str | None
    executable: str
    owner: int
