"""The live search page, a page of the Dask dashboard: http://HOST:PORT/mugraph beside
/status, for a LocalCluster started by mugraph and for an external `dask scheduler` alike.

How it gets there: `install(client)` registers `LivePlugin`, a SchedulerPlugin, from the client side
(`Client.register_plugin`, idempotent). On the scheduler its `start` builds a Bokeh server
application for the page with the dashboard's own factory (`distributed.dashboard.core.
BokehApplication`, as `distributed.dashboard.scheduler.connect` does for the dashboard's pages) and
adds it to the scheduler's running HTTP application (`scheduler.http_application.add_application`):
that `RoutingApplication` asks its applications in turn for every request, so a page added after
start is served on the dashboard's host and port and nothing new is bound. It also adds "mugraph" to
the dashboard's nav bar.

How data gets there: `publish(client, event)` sends the driver's event, made JSON-clean, with the
scheduler's event log (`Scheduler.log_event` on topic TOPIC, the RPC behind `Client.log_event`);
the plugin's `log_event` hook feeds it to a LiveState, which the page's sessions read once a second.
Sending is fire-and-forget on the client's event loop, in order (one at a time), bounded, and never
raises into the driver; the page never reads the run store.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import threading
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from distributed.diagnostics.plugin import SchedulerPlugin

from mugraph.dashboards.live_state import LiveState
from mugraph.dashboards.quiet import quiet_dashboard_websockets

logger = logging.getLogger(__name__)

PAGE = "mugraph"
TOPIC = "mugraph-live"
PLUGIN_NAME = "mugraph-live"
MAX_PENDING = 1000  # events in flight to the scheduler before new ones are dropped
SEND_TIMEOUT = 10.0
DONE_WAIT = 5.0  # seconds publish waits for the "done" event to arrive (the client closes right after)


class LivePlugin(SchedulerPlugin):
    """Lives on the scheduler: keeps the LiveState and serves the page from the dashboard."""

    idempotent = True  # registering it again (a resumed run, another run on the cluster) keeps this one
    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.state: LiveState | None = None
        self.page_path: str | None = None
        self._scheduler: Any = None
        self._app: Any = None

    async def start(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self.state = LiveState()
        quiet_dashboard_websockets()  # a tab closed early is no traceback in the scheduler's terminal
        try:
            self.page_path = self._attach()
        except Exception:
            logger.warning("mugraph: the live page could not be added to the dashboard", exc_info=True)
            self.page_path = None

    def log_event(self, topic: str, msg: Any) -> None:
        if topic != TOPIC or self.state is None or not isinstance(msg, dict):
            return
        try:
            self.state.apply(msg)
        except Exception:
            logger.warning("mugraph live page: bad event %r", msg.get("event"), exc_info=True)

    async def close(self) -> None:
        self._detach()

    def _attach(self) -> str | None:
        """Serve the page from the scheduler's dashboard; its path, or None without a dashboard."""
        scheduler = self._scheduler
        http = getattr(scheduler, "http_application", None)
        if http is None:
            return None
        try:
            from bokeh.server.tornado import BokehTornado
            from distributed.dashboard.core import BokehApplication
            from distributed.dashboard.scheduler import template_variables
            from tornado.ioloop import IOLoop

            from mugraph.dashboards.live_page import document
        except ImportError:  # no bokeh (or not one Dask accepts): no dashboard either
            return None
        dashboard = next((a for a in http.applications if isinstance(a, BokehTornado)), None)
        if dashboard is None:  # the scheduler serves no dashboard
            return None
        prefix = dashboard.prefix  # "" or "/some/prefix"
        path = f"{prefix}/{PAGE}"
        if any(isinstance(a, BokehTornado) and f"/{PAGE}" in a.app_paths for a in http.applications):
            return path  # already there (another instance of this plugin)
        if self.state is None:
            return None
        factory: Any = BokehApplication  # the dashboard's own: its Bokeh settings and websocket origins
        variables = template_variables(scheduler)  # memoized: the dict the dashboard's pages render with
        app = factory(
            {f"/{PAGE}": partial(document, self.state)}, scheduler, prefix=prefix, template_variables=variables
        )
        http.add_application(app)
        app.initialize(IOLoop.current())
        app.start()
        self._app = app
        try:
            pages = variables["pages"]
            if PAGE not in pages:
                pages.append(PAGE)  # a nav bar link on every dashboard page
        except Exception:
            logger.debug("mugraph: no nav bar link", exc_info=True)
        return path

    def _detach(self) -> None:
        app, self._app = self._app, None
        if app is None:
            return
        try:
            http = self._scheduler.http_application
            if app in http.applications:
                http.applications.remove(app)
            app.stop()
        except Exception:
            logger.debug("mugraph: removing the live page failed", exc_info=True)


def _page_path(dask_scheduler: Any) -> str | None:
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return getattr(plugin, "page_path", None)


def page_url(dashboard_link: str) -> str:
    """The page's URL: the dashboard link with its last path segment replaced by "mugraph"."""
    parts = urlsplit(dashboard_link)
    head = parts.path.rstrip("/").rpartition("/")[0] if parts.path.strip("/") else ""
    return urlunsplit((parts.scheme, parts.netloc, f"{head}/{PAGE}", "", ""))


def install(client: Any) -> str | None:
    """Add the mugraph page to the client's scheduler dashboard (idempotent); return its URL
    (client.dashboard_link with the last path segment replaced by 'mugraph'), or None when the
    scheduler serves no dashboard. Never raises: a failure is a warning and None."""
    try:
        client.register_plugin(LivePlugin(), name=PLUGIN_NAME)
        path = client.run_on_scheduler(_page_path)
        link = client.dashboard_link
    except Exception as e:
        logger.warning("mugraph: the live page could not be added to the Dask dashboard: %s", e)
        return None
    if path is None or not link:
        return None
    with _lock:
        _senders.setdefault(client, _Sender())
    return page_url(str(link))


def publish(client: Any, event: Mapping[str, object]) -> None:
    """Send one driver event to the page (after `install`; otherwise nothing is sent). Never raises."""
    sender = None
    try:
        with _lock:
            sender = _senders.get(client)
        if sender is not None:
            sender.send(client, _jsonable(event))
    except Exception as e:
        if sender is not None:
            sender.failed(repr(e), connection=isinstance(e, OSError))
        else:
            logger.warning("mugraph: an event for the live page was lost: %s", e)


def _default(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def _jsonable(event: Mapping[str, object]) -> dict[str, object]:
    """The event as the page receives it: JSON, numpy scalars and sets made plain."""
    out = json.loads(json.dumps(event, default=_default))
    assert isinstance(out, dict)
    return out


class _Sender:
    """Events to one client's scheduler, in order, without waiting for them (except "done")."""

    def __init__(self) -> None:
        self.pending = 0
        self.failures = 0
        self._guard = threading.Lock()
        self._order: asyncio.Lock | None = None

    def send(self, client: Any, msg: dict[str, object]) -> None:
        with self._guard:
            if self.pending >= MAX_PENDING:
                self.failed(f"{self.pending} events still on their way, the scheduler is slow or gone")
                return
            self.pending += 1
        try:
            loop = client.loop.asyncio_loop
            fut = asyncio.run_coroutine_threadsafe(self._send(client, msg), loop)
        except Exception:
            with self._guard:
                self.pending -= 1
            raise
        fut.add_done_callback(self._sent)
        if msg.get("event") == "done":
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:  # never block the loop that has to do the sending
                with contextlib.suppress(Exception, concurrent.futures.CancelledError):  # reported by _sent
                    fut.result(timeout=DONE_WAIT)

    async def _send(self, client: Any, msg: dict[str, object]) -> None:
        if self._order is None:
            self._order = asyncio.Lock()
        async with self._order:
            await asyncio.wait_for(client.scheduler.log_event(topic=TOPIC, msg=msg), SEND_TIMEOUT)

    def _sent(self, fut: concurrent.futures.Future[None]) -> None:
        with self._guard:
            self.pending -= 1
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            self.failed(repr(exc), connection=isinstance(exc, OSError))

    def failed(self, why: str, connection: bool = False) -> None:
        """One warning, not one a second; none for a lost connection to the scheduler, which the run
        itself reports (it ends saying the scheduler was lost, or goes on once it is back)."""
        self.failures += 1
        level = logging.WARNING if self.failures == 1 and not connection else logging.DEBUG
        logger.log(level, "mugraph: an event for the live page was lost (%s)", why)


_lock = threading.Lock()
_senders: weakref.WeakKeyDictionary[Any, _Sender] = weakref.WeakKeyDictionary()  # by client
