"""The local cluster's Dask scheduler in a process of its own, as on a real cluster.

In the driver's process the scheduler (and its dashboard) shared one core with the driver: over
lora's whole space on 2 workers it was most of that process's CPU. `SchedulerProcess` is the
scheduler of a SpecCluster (`distributed.deploy.ProcessInterface`): it starts
`python -c BOOTSTRAP` with one end of a socket pair as its standard input, and sends through it the
driver's `sys.path`, then a `SchedulerSpec`: the Scheduler's keyword arguments (the run's TLS
credentials among them, which so never touch a disk, a command line or an environment), the Dask
configuration of the moment and the log level. The process answers with its address.

Once the run ends its scheduler has nothing to say: what it logs while the workers close (a `gather`
the driver abandoned on an interrupt fails as they go) is about work nobody waits for, and would land
in the user's terminal after the driver's last line. So the process goes quiet on SIGINT or SIGTERM
(a terminal's Ctrl-C reaches the whole process group, and workers that take SIGTERM close at once),
and the driver asks it to (`quiet`) before it closes the workers.

Lifetime: the process outlives SIGINT and SIGTERM (they only quiet it: the driver then stops the
cluster, and the scheduler must answer it to the end), and it is started with both blocked, so that
there is no instant in which one kills it with a traceback. It ends when the cluster terminates it,
or when its standard input reaches end of file: the driver closed the pipe, or died (even by SIGKILL,
the kernel closes the driver's end)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

import dask.config
from distributed.core import Status
from distributed.deploy.spec import ProcessInterface

# Run by `python -c`: what must happen before anything else is imported (the signals), then the path
# the driver imports from, then `serve`. Kept short: it is the process's command line.
BOOTSTRAP = (
    "import signal as s;"
    "s.signal(s.SIGINT,s.SIG_IGN);s.signal(s.SIGTERM,s.SIG_IGN);"
    "s.pthread_sigmask(s.SIG_UNBLOCK,{s.SIGINT,s.SIGTERM});"
    "import sys;from multiprocessing.connection import Connection as C;c=C(0);sys.path[:]=c.recv();"
    "from mugraph.pipeline.scheduler_process import serve;serve(c)"
)
START_TIMEOUT = 120.0  # a Python start, distributed's and bokeh's imports: seconds on a loaded machine
CLOSE_TIMEOUT = 10.0  # for the scheduler to close itself once asked; then the process is killed
QUIET = "quiet"  # the driver's one message before end of file: log nothing more
QUIET_TIMEOUT = 2.0  # for the process to confirm it is quiet (it answers at once unless overloaded)
_INTERRUPTS = {signal.SIGINT, signal.SIGTERM}  # ignored until `serve` takes them (to go quiet)
QUIET_LEVEL = logging.CRITICAL + 1  # stream handlers at this level print nothing
# The module of the functions the driver submits. The scheduler unpickles each task it is sent, so the
# first one imported this module and everything under it (the search, Z3, NumPy: 0.25 s) while the run's
# first task waited; imported beside the workers' start instead (`_preload`).
TASK_MODULES = ("mugraph.pipeline.worker",)


@dataclass(frozen=True)
class SchedulerSpec:
    """What the scheduler process needs, sent through its standard input (never on a disk)."""

    options: dict[str, Any]  # distributed.Scheduler's keyword arguments (the Security object among them)
    config: dict[str, Any]  # the driver's Dask configuration when the cluster starts
    log_level: int  # distributed's and bokeh's stream handlers log at this level and above


@dataclass(frozen=True)
class _Started:
    address: str


@dataclass(frozen=True)
class _Failed:
    error: str


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread while a child is started: the child inherits the mask
    and is not killed by either before its first line ignores them. Multiprocessing's resource tracker
    would unblock them on its own start, so it is started first (the nannies use it anyway)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class SchedulerProcess(ProcessInterface):
    """A SpecCluster's scheduler, in a child process; `options` are distributed.Scheduler's."""

    def __init__(self, log_level: int = logging.WARNING, **options: Any) -> None:
        super().__init__()
        self.options = options
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    async def start(self) -> None:
        ours, theirs = Pipe()
        with _signals_blocked():
            self.process = subprocess.Popen([sys.executable, "-c", BOOTSTRAP], stdin=theirs.fileno(), stdout=2)
        theirs.close()
        self._conn = ours
        try:
            ours.send(list(sys.path))
            ours.send(SchedulerSpec(self.options, dict(dask.config.config), self.log_level))
            reply = await self._reply()
        except BaseException:
            await self._stop()
            raise
        if isinstance(reply, _Failed):
            await self._stop()
            raise RuntimeError(f"the Dask scheduler process failed to start: {reply.error}")
        self.address = self.external_address = reply.address
        await super().start()

    async def _reply(self) -> _Started | _Failed:
        assert self._conn is not None and self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while not self._conn.poll():
            if self.process.poll() is not None:
                return _Failed(f"it exited with status {self.process.returncode}")
            if time.monotonic() > deadline:
                return _Failed(f"no answer in {START_TIMEOUT:.0f} s")
            await asyncio.sleep(0.02)
        reply = self._conn.recv()
        assert isinstance(reply, (_Started, _Failed)), reply
        return reply

    async def _stop(self) -> None:
        """Close the pipe (the process closes its scheduler and exits), wait for it, kill it if it
        does not exit in time."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        proc = self.process
        if proc is None:
            return
        deadline = time.monotonic() + CLOSE_TIMEOUT
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if proc.poll() is None:
            proc.kill()
            await asyncio.get_running_loop().run_in_executor(None, proc.wait)

    def quiet(self) -> bool:
        """Have the scheduler log nothing from now on (its stream handlers raised past CRITICAL);
        True once the process confirms it. Called from the driver's thread before the workers close."""
        conn = self._conn
        if conn is None:
            return False
        try:
            conn.send(QUIET)
            return bool(conn.poll(QUIET_TIMEOUT)) and conn.recv() == QUIET
        except (EOFError, OSError):
            return False

    async def close(self) -> None:
        await self._stop()
        await super().close()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid


# What runs in the scheduler process.


def serve(conn: Connection) -> None:
    """The scheduler process's main: the spec from `conn`, the scheduler until it closes or `conn`
    reaches end of file."""
    spec = conn.recv()
    assert isinstance(spec, SchedulerSpec)
    dask.config.update(dask.config.config, spec.config, priority="new")
    _log_at(spec.log_level)
    # a dashboard port taken after the driver looked: the driver's start line says so (`_local_cluster`)
    warnings.filterwarnings("ignore", message=r"Port \d+ is already in use", category=UserWarning)
    for sig in _INTERRUPTS:
        signal.signal(sig, _go_quiet)
    asyncio.run(_serve(conn, spec))


def _go_quiet(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM in the scheduler process: the run is ending, log nothing more."""
    _log_at(QUIET_LEVEL)


def _log_at(level: int) -> None:
    """distributed's and bokeh's stream handlers at `level`, as SpecCluster's silence_logs does in the
    driver's process."""
    for root in ("distributed", "bokeh"):
        for handler in logging.getLogger(root).handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setLevel(level)


async def _serve(conn: Connection, spec: SchedulerSpec) -> None:
    from distributed import Scheduler

    try:
        scheduler = Scheduler(**spec.options)
        await scheduler
    except Exception as e:
        with contextlib.suppress(OSError):
            conn.send(_Failed(f"{type(e).__name__}: {e}"))
        return
    try:
        conn.send(_Started(str(scheduler.address)))
    except OSError:  # the driver gave up on the start (or died): nobody will use this scheduler
        with contextlib.suppress(Exception):
            await asyncio.wait_for(scheduler.close(), CLOSE_TIMEOUT / 2)
        return
    threading.Thread(target=_preload, args=(TASK_MODULES,), name="task-imports", daemon=True).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=_watch, args=(conn, loop, stop), name="driver-watch", daemon=True).start()
    finished = asyncio.ensure_future(scheduler.finished())
    asked = asyncio.ensure_future(stop.wait())
    await asyncio.wait({finished, asked}, return_when=asyncio.FIRST_COMPLETED)
    asked.cancel()
    if scheduler.status not in (Status.closing, Status.closed):
        with contextlib.suppress(Exception):  # the driver is gone: close what can be closed, quickly
            await asyncio.wait_for(scheduler.close(), CLOSE_TIMEOUT / 2)
    finished.cancel()


def _preload(modules: tuple[str, ...]) -> None:
    """Import the task functions' modules while the workers start, not on the run's first task (the
    import lock makes a task unpickled meanwhile wait for the same import). A failure here is left to
    the task that needs the module, where it is reported."""
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _watch(conn: Connection, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Answer the driver's `QUIET`; at end of file (or any other message) set `stop` in the loop."""
    with contextlib.suppress(EOFError, OSError):
        while conn.recv() == QUIET:
            _log_at(QUIET_LEVEL)
            conn.send(QUIET)
    with contextlib.suppress(RuntimeError):  # the loop has closed already
        loop.call_soon_threadsafe(stop.set)
