"""A browser whose websocket to the dashboard fails prints nothing into the terminal of the process
that serves the dashboard (with a LocalCluster, the `optimize` terminal)."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
import urllib.request
from typing import Any

import distributed
import pytest

from mugraph.dashboards.live import install
from mugraph.dashboards.quiet import WebsocketNoise

Client: Any = distributed.Client
LocalCluster: Any = distributed.LocalCluster


async def _websockets(page: str) -> None:
    """Three websockets that fail or end early: a bad token (Bokeh's handler raises), one closed as
    soon as it opens, and an upgrade request whose connection is dropped before any answer."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    ws_url = page.replace("http://", "ws://") + "/ws"
    html = urllib.request.urlopen(page, timeout=30).read().decode()
    token = re.search(r'"token":\s*"([^"]+)"', html)
    assert token is not None, html[:500]
    for subprotocol in ("bokeh, not-a-token", f"bokeh, {token.group(1)}"):
        request = HTTPRequest(ws_url, headers={"Sec-WebSocket-Protocol": subprotocol})
        try:
            ws = await websocket_connect(request)
            ws.close()
        except Exception:
            pass  # the server may drop the bad one before the handshake completes
    host, port = page.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        (
            f"GET {ws_url.split(port, 1)[1]} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: bokeh, {token.group(1)}\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    writer.close()


def _demoted(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mugraph.dashboards.quiet"]


class _Seen(logging.Handler):
    """What the loggers' handlers (the terminal, with Dask's logging set-up) would have printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_failed_dashboard_websockets_print_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    seen = _Seen()
    watched = [
        logging.getLogger(n)
        for n in ("tornado", "tornado.application", "tornado.general", "asyncio", "bokeh", "bokeh.server.views.ws")
    ]
    for lg in watched:
        lg.addHandler(seen)
    try:
        with (
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as cluster,
            Client(cluster) as client,
        ):
            url = install(client)
            assert url is not None
            with caplog.at_level(logging.DEBUG, logger="mugraph.dashboards.quiet"):
                asyncio.run(_websockets(url))
                deadline = time.monotonic() + 30  # the bad token's record, demoted, shows the server saw it
                while time.monotonic() < deadline and not _demoted(caplog):
                    time.sleep(0.2)
    finally:
        for lg in watched:
            lg.removeHandler(seen)
    shown = [f"{r.name}: {r.getMessage()[:200]}" for r in seen.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not shown, shown
    assert _demoted(caplog), "the bad websocket's failure never reached the filter"


def _record(name: str, message: str, exc: BaseException | None, level: int = logging.ERROR) -> logging.LogRecord:
    exc_info = None
    if exc is not None:
        try:
            raise exc
        except BaseException:
            exc_info = sys.exc_info()
    return logging.LogRecord(name, level, __file__, 1, message, None, exc_info)


def test_the_filter_lets_other_errors_through() -> None:
    f = WebsocketNoise()
    assert f.filter(_record("tornado.application", "Uncaught exception GET /status (127.0.0.1)", ValueError("x")))
    assert f.filter(_record("asyncio", "Task exception was never retrieved", RuntimeError("solver")))
    assert not f.filter(
        _record("bokeh.server.views.ws", "Failed sending message as connection was closed", None, logging.WARNING)
    )
    assert not f.filter(
        _record("tornado.application", "Uncaught exception GET /mugraph/ws (127.0.0.1)", ConnectionResetError("peer"))
    )
