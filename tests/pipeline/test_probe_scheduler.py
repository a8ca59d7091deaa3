"""`--scheduler ADDRESS` is checked before the run's store exists: a port where nothing listens, one
where something that is not Dask listens (silent, like a dashboard's; or answering HTTP, like a proxy)
and a real Dask scheduler, each on a real socket."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from distributed import Scheduler

from mugraph.ir.errors import MugraphError
from mugraph.pipeline.cluster import probe_scheduler


def _serve(reply: bytes | None) -> Iterator[str]:
    """A listener on a free port that accepts connections and sends `reply` (or nothing)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        server.close()
        for c in held:
            c.close()


@pytest.fixture
def silent() -> Iterator[str]:
    yield from _serve(None)


@pytest.fixture
def http() -> Iterator[str]:
    yield from _serve(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def test_a_silent_listener_is_said_to_be_no_scheduler(silent: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(MugraphError, match="accepts connections but does not answer as a Dask scheduler"):
        probe_scheduler(silent, timeout=5, handshake_timeout=2)
    assert time.monotonic() - t0 < 30


def test_an_http_reply_is_said_to_be_no_scheduler(http: str) -> None:
    with pytest.raises(MugraphError, match=r"not the dashboard's 8787\); or, if the scheduler uses TLS, give a tls://"):
        probe_scheduler(http, timeout=5, handshake_timeout=2)


def test_nothing_listening_is_said_so() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed below: nothing listens there any more
    with pytest.raises(MugraphError, match="cannot reach the Dask scheduler"):
        probe_scheduler(f"tcp://127.0.0.1:{port}", timeout=1)


def test_each_refused_attempt_is_told_with_the_seconds_left() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    told: list[tuple[str, float]] = []
    with pytest.raises(MugraphError, match="cannot reach the Dask scheduler"):
        probe_scheduler(f"tcp://127.0.0.1:{port}", timeout=1, waiting=lambda r, left: told.append((r, left)))
    assert len(told) >= 2 and all("refused" in r.lower() for r, _ in told)
    lefts = [left for _, left in told]
    assert lefts == sorted(lefts, reverse=True) and 0 < lefts[-1] < lefts[0] <= 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_a_terminal_sees_the_wait_counted_down_a_log_one_line(tty: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from mugraph.pipeline import cluster
    from mugraph.run import prepare

    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    err = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    real = cluster.probe_scheduler
    monkeypatch.setattr(cluster, "probe_scheduler", lambda a, **kw: real(a, **{**kw, "timeout": 1.0}))
    with pytest.raises(MugraphError, match="cannot reach the Dask scheduler"):
        prepare._probe_scheduler_live(address)
    written = err.getvalue()
    if not tty:  # a log gets one line as the wait starts, not a countdown
        assert written.startswith(f"mugraph: waiting for the Dask scheduler at {address} (Connection refused)")
        assert "): giving up in " in written and written.count("\n") == 1 and written.endswith("\n"), written
        return
    assert f"waiting for the Dask scheduler at {address}" in written and "): giving up in " in written
    assert written.endswith("\r") and written.rsplit("\r", 2)[-2].strip() == ""  # the line is blanked


def test_a_real_scheduler_passes() -> None:
    import asyncio

    ready = threading.Event()
    stop: list[asyncio.Event] = []
    address: list[str] = []

    async def run() -> None:
        async with Scheduler(host="127.0.0.1", port=0, dashboard_address=":0") as s:
            address.append(s.address)
            stop.append(asyncio.Event())
            ready.set()
            await stop[0].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    try:
        probe_scheduler(address[0], timeout=5, handshake_timeout=5)  # raises nothing
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)


def test_a_long_reason_is_cut_at_a_word() -> None:
    """Dask's reasons run long (a TLS port read as plain tcp: ConnectionResetError, then the stream's
    repr); a cut mid-word ('Connectio)') reads as a typo."""
    from mugraph.pipeline.cluster import _clipped

    reason = "Stream is closed: while trying to read: ConnectionResetError: [Errno 104] Connection reset by peer " * 3
    out = _clipped(reason + "\nsecond line")
    assert out.endswith(" …") and len(out) <= 162 and "second line" not in out
    assert reason.startswith(out.removesuffix(" …")) and reason[len(out) - 2] == " "
    assert _clipped("short reason") == "short reason"
