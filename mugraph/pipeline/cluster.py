"""The Dask cluster a run uses: a LocalCluster of worker processes (one thread each, one per core by
default), or an existing cluster reached through its scheduler's address.

The local cluster speaks TLS with a key and certificate made for the run and held only in memory
(`Security.temporary()`; its scheduler, in a process of its own as on a real cluster, gets them
through a pipe): binding to 127.0.0.1 is no access control on a shared host, and a client that can
connect can run code on every worker. Its workers start only when the run starts
them (`start_workers`), in batches, with the memo URL in their environment: the secret never goes
through the scheduler, and an interrupt stops the start-up between two batches."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar
from urllib.parse import urlsplit

import dask.config
from distributed import Client, LocalCluster, Scheduler
from distributed.security import Security

from mugraph.arrays.backend import cupy_available
from mugraph.ir.errors import MugraphError
from mugraph.pipeline import interrupts
from mugraph.pipeline.dask_handlers import dask_handlers_at
from mugraph.pipeline.dask_logs import dask_logs_at
from mugraph.pipeline.scheduler_process import SchedulerProcess

T = TypeVar("T")

DEFAULT_DASHBOARD = "127.0.0.1:8787"
LOCAL_HOST = "127.0.0.1"
# Worker processes started at once: a batch costs a few seconds on a loaded machine, and between
# two batches an interrupt is noticed (a large --workers then Ctrl-C stops within one batch).
WORKER_BATCH = 4
WORKER_START_TIMEOUT = 300.0  # per batch; processes that never join are a broken machine, not a slow one
# Dask's worker profiler samples the task thread's stack every 10 ms, which cost a search task
# about 5% (gated_mlp, 1 worker: 42.4-43.5 s of task time without it, 44.7-45.3 s with it). Every
# 50 ms keeps the dashboard's profile page, coarser, at a fifth of the samples.
PROFILER_SETTINGS: dict[str, object] = {"distributed.worker.profile.interval": "50ms"}
# Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536 (to hand freed memory back to the
# OS). Setting any malloc threshold turns off glibc's dynamic mmap threshold, so every allocation of
# 128 KiB or more becomes its own mmap and munmap, and the fingerprints' temporary arrays fault their
# pages in again on every use: the local cluster's workers start without it (None unsets a key of
# distributed.nanny.pre-spawn-environ). The thresholds a fresh Z3 context per query needs are set by
# the prune stage itself, in every process that runs queries (stages/prune/heap.py).
SPAWN_ENVIRON_OVERRIDES: dict[str, object] = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
# Periodic callbacks every Dask server runs whether or not there is work, in the driver's process for
# each nanny and in the scheduler's process (the scheduler was in the driver's until it got its own,
# which gets these settings through its pipe): the event-loop health tick (every 20 ms, only to warn of a blocked
# loop), the system monitor (500 ms, the dashboard's System page) and the nanny's and worker's memory
# monitor (100 ms). An idle 2-worker cluster cost the driver's process 32-34 ms of CPU per second with
# Dask's intervals, 8-9 ms with these (benchmarks/RESULTS.md "Idle cost of the local cluster"); over
# lora's whole space on 2 workers that is most of the driver's CPU. A blocked loop is still reported
# (within a second), the System page updates every 2 s, and a worker past its memory limit is still
# stopped, a second later at most.
IDLE_SETTINGS: dict[str, object] = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
}
WORKER_SETTINGS = {**SPAWN_ENVIRON_OVERRIDES, **PROFILER_SETTINGS, **IDLE_SETTINGS}
# The local cluster copies its own description to the scheduler (for the dashboard) every second by
# default, a TLS round trip through the driver's and the scheduler's event loops that no run reads.
# Every 30 s it costs an idle 2-worker cluster's driver process 1.0 ms of CPU a second less (3.3 → 2.3
# ms/s, benchmarks/bench_idle.py; the client's own refresh of its scheduler description, every 2 s,
# made no difference there and is left at Dask's).
CLUSTER_SYNC_SECONDS = 30.0


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class _LocalCluster(LocalCluster):
    """A LocalCluster (its nannies and their workers in this process's care, as before) whose scheduler
    runs in a process of its own: LocalCluster's scheduler spec, given to `SchedulerProcess`."""

    def __init__(self, *, silence_logs: int, **kwargs: object) -> None:
        self._log_level = silence_logs
        super().__init__(silence_logs=silence_logs, **kwargs)

    async def _start(self) -> None:
        if self.scheduler is None and self.scheduler_spec is not None and self.scheduler_spec["cls"] is Scheduler:
            options = {**self.scheduler_spec.get("options", {}), "log_level": self._log_level}
            if options.get("dashboard") is False:  # Dask's HTTP routes still listen: not on 8787, loopback only
                options["dashboard_address"] = f"{LOCAL_HOST}:0"
            self.scheduler_spec = {"cls": SchedulerProcess, "options": options}
        await super()._start()


@dataclass
class _Pending:
    """A local cluster's workers not started yet."""

    cluster: LocalCluster
    workers: int


class _WorkerResources(TypedDict, total=False):
    """The local cluster's worker resources, declared only where there is a GPU."""

    resources: dict[str, int]


_PENDING: weakref.WeakKeyDictionary[Client, _Pending] = weakref.WeakKeyDictionary()
QUIET_LOGS = logging.ERROR  # Dask's records a run lets through
_STARTING = threading.Lock()  # a local cluster's port choice and scheduler start, one run at a time
# the dashboard port a local cluster was asked for and found taken (its start line says so)
_TAKEN: weakref.WeakKeyDictionary[Client, str] = weakref.WeakKeyDictionary()
_NO_DASHBOARD: weakref.WeakSet[Client] = weakref.WeakSet()  # clients of local clusters started without one


def dashboard_link(client: Client) -> str:
    """The client's dashboard URL; "" where its local cluster was started with none (its scheduler still
    serves Dask's HTTP routes, on a free port, which Dask reports as the dashboard's)."""
    return "" if client in _NO_DASHBOARD else str(client.dashboard_link or "")


def dashboard_taken(client: Client) -> str | None:
    """The dashboard port asked for that another process held (the cluster's is elsewhere), or None."""
    return _TAKEN.get(client)


def local_dashboard(address: str) -> str:
    """`:PORT` or `PORT` means the loopback interface, as the start line says (Dask would take all)."""
    host, sep, port = address.rpartition(":")
    if not sep:
        return f"{LOCAL_HOST}:{address}"
    return f"{host or LOCAL_HOST}:{port}"


def port_taken(address: str) -> bool:
    """Whether something listens on the dashboard address's port already (bound as Tornado binds,
    with SO_REUSEADDR, so a port that only lingers after a closed connection is free)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return False
    try:
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host.strip("[]"), int(port)))
    except OSError:
        return True
    return False


def free_dashboard(address: str) -> tuple[str, str | None]:
    """The address to give the scheduler's dashboard, and a line to print where the asked-for port
    is taken: then port 0 (the system picks one), which Dask takes without its own multi-line
    warning (it warns where the port it was given is taken)."""
    address = local_dashboard(address)
    if not port_taken(address):
        return address, None
    host, _, port = address.rpartition(":")
    return f"{host}:0", port


def probe_scheduler(
    address: str,
    timeout: float = 20.0,
    handshake_timeout: float = 10.0,
    waiting: Callable[[str, float], None] | None = None,
) -> None:
    """A MugraphError unless something accepts a TCP connection at the scheduler's host and port within
    `timeout` seconds (a scheduler started together with the command may take a few to listen) and
    answers Dask's handshake within `handshake_timeout`, before the run's store exists. A host that does
    not resolve fails at once; a port where something else listens (the dashboard's, an HTTP proxy) is
    said to be no Dask scheduler, where the client hung on it or read its reply as a 3-EiB frame.
    `waiting(reason, seconds_left)` is told of each refused attempt, so that a mistyped address is
    not 20 silent seconds."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, deadline - time.monotonic())):
                break
        except (OSError, ValueError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
            left = deadline - time.monotonic()
            if isinstance(e, OSError) and not isinstance(e, socket.gaierror) and left > 0:
                if waiting is not None:
                    waiting(reason, left)
                time.sleep(0.2)
                continue
            raise MugraphError(
                f"cannot reach the Dask scheduler at {address} ({reason}); start it, or leave "
                "out --scheduler to run on a local cluster"
            ) from None
    problem = _dask_handshake(address, handshake_timeout)
    if problem is not None:
        tls = "; or, if the scheduler uses TLS, give a tls:// address" if address.startswith("tcp://") else ""
        raise MugraphError(
            f"{address} accepts connections but does not answer as a Dask scheduler ({problem}); is it the "
            f"scheduler's port (8786 by default, not the dashboard's 8787){tls}?"
        )


def _clipped(text: str, most: int = 160) -> str:
    """The first line of `text`, cut at a word (with an ellipsis) where longer than `most`."""
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= most else line[:most].rsplit(" ", 1)[0] + " …"


def _dask_handshake(address: str, timeout: float) -> str | None:
    """None where the peer at `address` completes Dask's connection handshake within `timeout` seconds,
    else what went wrong. In a thread of its own, so a caller's running event loop (a notebook's) is
    not disturbed."""
    import asyncio

    from distributed.comm.core import connect

    security = external_security(address)
    kwargs = security.get_connection_args("client") if security is not None else {}

    async def shake() -> None:
        comm = await connect(address, timeout=timeout, **kwargs)
        await comm.close()

    try:
        call_within(timeout + 5, asyncio.run, asyncio.wait_for(shake(), timeout))
    except TimeoutError:  # the future's, asyncio's and the socket's are one class since Python 3.11
        return f"no handshake within {timeout:g} s"
    except Exception as e:  # garbage read as frames can fail anywhere in deserialisation
        return f"{type(e).__name__}: {_clipped(str(e))}"
    return None


def call_within(timeout: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a thread of its own: its result or its exception, or TimeoutError after
    `timeout` seconds. A call that hangs on the network cannot be cancelled: its thread is left to end
    on its own. The caller's thread, and any event loop running there (a notebook's), stay free."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="mugraph-within")
    try:
        return pool.submit(fn, *args, **kwargs).result(timeout)
    finally:
        pool.shutdown(wait=False)


def external_security(address: str) -> Security | None:
    """A `tls://` scheduler is reached with the credentials of Dask's configuration
    (`distributed.comm.tls.*`, e.g. from DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT); see
    docs/cluster-security.md."""
    if not address.startswith("tls://"):
        return None
    security = Security()
    if not security.get_connection_args("client").get("ssl_context"):
        raise MugraphError(
            f"--scheduler {address}: a tls:// scheduler needs a client certificate in Dask's "
            "configuration (distributed.comm.tls.ca-file, .client.cert, .client.key); see "
            "docs/cluster-security.md"
        )
    return security


async def _block_sigint_in_this_thread() -> None:
    """Run in the cluster's event loop thread: the threads it makes from now on (one per worker process,
    which starts the process) inherit the mask, and so do the worker processes. A terminal's Ctrl-C
    (sent to the whole process group) then reaches only the driver, which stops the cluster, and no
    worker prints a traceback. The main thread still takes SIGINT, and SIGTERM stays unblocked (the
    nanny stops its worker with it). Multiprocessing's resource tracker, started on first use, would
    unblock SIGINT again on its way out of its own start: it is started first. SIGHUP is blocked in
    this thread from its start (`_deaf_to_hangup`)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})


@contextlib.contextmanager
def _deaf_to_hangup() -> Iterator[None]:
    """Within, SIGHUP is blocked in this thread, so that what the local cluster starts here inherits
    the mask: its event loop thread, and from it the scheduler process, the worker processes and
    multiprocessing's resource tracker (started here, if not yet running, as the tracker unblocks only
    SIGINT and SIGTERM). A closed terminal's SIGHUP, sent to the whole process group, then reaches only
    the driver (the command line takes it as SIGTERM), which closes the cluster as after any interrupt:
    by default each of these processes would die of it, the driver waiting on a scheduler that is gone
    and the tracker relaunched with tracebacks. A SIGHUP that comes meanwhile waits for the block's end."""
    from multiprocessing import resource_tracker

    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def dask_client(
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard_address: str | None = DEFAULT_DASHBOARD,
    connect_timeout: float = 20.0,
) -> Iterator[Client]:
    """A client on the cluster at `scheduler` (whose workers were started with `dask worker`), or on a
    fresh TLS LocalCluster whose `workers` processes `start_workers` starts, serving its dashboard at
    `dashboard_address` (None: none, and its scheduler starts without importing Bokeh, some 1.5 s of
    CPU); both are closed (the LocalCluster's workers first, then its scheduler) on exit."""
    if scheduler is not None:  # probed already, before the run's store was made (`run.prepare.preflight`)
        security = external_security(scheduler)
        try:
            client = Client(scheduler, timeout=connect_timeout, security=security)
        except (OSError, TimeoutError) as e:
            raise MugraphError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or default_workers()
    security = Security.temporary()
    # with a host's own log handlers, what silence_logs cannot reach; Dask's own, held while any
    # local cluster of this process is up (its silence_logs alone is undone by the first to close)
    with dask_logs_at(QUIET_LOGS), dask_handlers_at(QUIET_LOGS), contextlib.ExitStack() as closing:
        with interrupts.held():  # an interrupt comes once the cluster and client are whole, closed below
            with _deaf_to_hangup():
                cluster, taken = _local_cluster(security, dashboard_address)
            closing.callback(cluster.close)
            client = Client(cluster, security=security)
            closing.callback(client.close)
            closing.callback(_close_workers, client, cluster)
        _PENDING[client] = _Pending(cluster, n)
        if taken is not None:
            _TAKEN[client] = taken
        if dashboard_address is None:
            _NO_DASHBOARD.add(client)
        yield client


def _local_cluster(security: Security, dashboard_address: str | None) -> tuple[LocalCluster, str | None]:
    """A TLS LocalCluster with no worker yet, and the dashboard port asked for that was taken."""
    kwargs: _WorkerResources = {}
    if cupy_available():
        kwargs["resources"] = {"GPU": 1}
    with _STARTING, dask.config.set(WORKER_SETTINGS):  # two runs in one process: one sees the port the other took
        address, taken = (None, None) if dashboard_address is None else free_dashboard(dashboard_address)
        cluster = _LocalCluster(
            n_workers=0,
            threads_per_worker=1,
            processes=True,
            host=LOCAL_HOST,
            security=security,
            dashboard_address=address,
            silence_logs=QUIET_LOGS,
            scheduler_sync_interval=CLUSTER_SYNC_SECONDS,
            **kwargs,
        )
    # another process may take the port between the look and the start (two runs starting together):
    # the scheduler moves its dashboard (its process keeps Dask's warning to itself) and the start
    # line says which port was taken
    if address is None:
        return cluster, None
    asked, got = address.rpartition(":")[2], urlsplit(cluster.dashboard_link).port
    if taken is None and asked not in ("", "0") and got is not None and str(got) != asked:
        taken = asked
    return cluster, taken


def start_workers(client: Client, environment: Mapping[str, str] | None = None) -> None:
    """Start a local cluster's worker processes (nothing for an external cluster, or once started), with
    `environment` added to theirs, WORKER_BATCH at a time; an interrupt stops it between batches."""
    pending = _PENDING.pop(client, None)
    if pending is None:
        return
    spec = pending.cluster.new_spec
    spec["options"] = {**spec.get("options", {}), "env": dict(environment or {})}
    client.sync(_block_sigint_in_this_thread)
    started = 0
    while started < pending.workers:
        if interrupts.requested():
            raise KeyboardInterrupt  # one came and was swallowed on the way (a finalizer, a callback)
        started = min(pending.workers, started + WORKER_BATCH)
        with dask.config.set(WORKER_SETTINGS):  # read as each nanny and worker is made
            pending.cluster.scale(started)
            client.wait_for_workers(started, timeout=WORKER_START_TIMEOUT)


def _close_workers(client: Client, cluster: LocalCluster) -> None:
    """Close the workers while their scheduler still answers: a worker that outlives it logs a failed
    heartbeat with a CommClosedError traceback into the terminal. The scheduler is quieted first (see
    `SchedulerProcess.quiet`). Best effort: the cluster closes after."""
    if isinstance(cluster.scheduler, SchedulerProcess):
        cluster.scheduler.quiet()
    if not cluster.workers:
        return
    with contextlib.suppress(Exception):
        cluster.scale(0)
        client.sync(_wait_for_no_workers, client, timeout=30.0)


async def _wait_for_no_workers(client: Client, timeout: float) -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while client.cluster is not None and client.cluster.workers and loop.time() < deadline:
        await asyncio.sleep(0.05)


def gpu_workers(client: Client) -> int:
    """How many workers declared a GPU resource."""
    info = client.scheduler_info()["workers"]
    return sum(1 for w in info.values() if w.get("resources", {}).get("GPU", 0) > 0)


def confirming_worker(client: Client) -> str | None:
    """The worker that takes every confirmation when no worker has a GPU: the first by address.

    A Confirmer holds the reference's outputs on fresh seeds and the values its μGraphs share;
    one worker building that once, rather than every worker building its own, saves most of the
    confirm stage's work. None when the cluster has no worker yet."""
    workers = sorted(client.scheduler_info()["workers"])
    return workers[0] if workers else None
