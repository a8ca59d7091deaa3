"""Keeps the dashboard's websocket failures out of the terminal.

A browser tab closed (or reloaded) while a dashboard page's websocket is still opening makes Bokeh's
websocket handler fail, and tornado logs that as a 25-line "Uncaught exception" traceback. With a
LocalCluster the scheduler, hence the dashboard, runs in a child of the `optimize` process that
writes to the same terminal, so the traceback lands in the middle of the progress line. Nothing is
wrong with the run; the record is demoted to one DEBUG line on this module's logger.
"""

from __future__ import annotations

import logging
import traceback
from types import TracebackType

logger = logging.getLogger(__name__)

# Where the records are made: tornado's handler and callback errors, asyncio's unretrieved task
# errors, and Bokeh's websocket handler itself.
LOGGERS = ("tornado.application", "tornado.general", "asyncio", "bokeh.server.views.ws")
WS_HANDLER = ("bokeh", "server", "views", "ws.py")  # Bokeh's websocket handler module, as path parts
CLOSED = ("WebSocketClosedError", "StreamClosedError", "ConnectionResetError", "BrokenPipeError", "CancelledError")


def _through_ws_handler(tb: TracebackType | None) -> bool:
    """Whether a traceback passes through Bokeh's websocket handler."""
    for frame in traceback.extract_tb(tb):
        parts = frame.filename.replace("\\", "/").split("/")
        if tuple(parts[-len(WS_HANDLER) :]) == WS_HANDLER:
            return True
    return False


class WebsocketNoise(logging.Filter):
    """Drops a dashboard websocket's failure (logging it at DEBUG instead); lets everything else pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.is_noise(record):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        what = f"{type(exc).__name__}: {exc}" if exc is not None else record.getMessage()
        logger.debug("a dashboard websocket failed (a browser tab closed early?): %s", what.splitlines()[0][:300])
        return False

    @staticmethod
    def is_noise(record: logging.LogRecord) -> bool:
        if record.name == "bokeh.server.views.ws":
            return True  # every record there is about one browser's websocket
        if record.exc_info and _through_ws_handler(record.exc_info[2]):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        return exc is not None and type(exc).__name__ in CLOSED and "/ws" in message


_FILTER = WebsocketNoise()


def quiet_dashboard_websockets() -> None:
    """Install the filter in this process (idempotent: one filter object, added once per logger)."""
    for name in LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)
