"""A `rediss://` memo URL naming a server without TLS: said to be that at once, rather than a server
that cannot be reached after the handshake's timeout."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mugraph.ir.errors import MugraphError
from mugraph.storage.memo.redis_binary import find_redis_server
from mugraph.storage.memo.redis_probe import answers_plain
from mugraph.storage.memo.session import check_memo_reachable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def plain_port(tmp_path: Path) -> Iterator[int]:
    """A real redis-server on a TCP port, without TLS."""
    port = _free_port()
    proc = subprocess.Popen(
        [find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if answers_plain("127.0.0.1", port, timeout=0.1):
                break
            time.sleep(0.05)
        yield port
    finally:
        proc.kill()
        proc.wait()


def test_a_rediss_url_to_a_plain_server_says_so_at_once(plain_port: int) -> None:
    t0 = time.perf_counter()
    with pytest.raises(MugraphError, match=r"answers without TLS: write its URL with redis://"):
        check_memo_reachable(f"rediss://127.0.0.1:{plain_port}/0")
    assert time.perf_counter() - t0 < 4.0  # before the 5-s connect timeout a handshake would wait for
    check_memo_reachable(f"redis://127.0.0.1:{plain_port}/0")  # the same server, written as it speaks


def test_a_server_that_does_not_speak_redis_is_not_taken_for_one() -> None:
    """A listener that closes on bytes it does not understand (as a TLS server does on a bare PING)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def close_each() -> None:
            conn, _ = listener.accept()
            conn.recv(64)
            conn.close()

        threading.Thread(target=close_each, daemon=True).start()
        assert not answers_plain("127.0.0.1", port)
    assert not answers_plain("127.0.0.1", _free_port())  # nothing listening
