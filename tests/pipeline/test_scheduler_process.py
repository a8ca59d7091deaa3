"""The local cluster's scheduler runs in a process of its own: a child of the driver that answers the
run's client, outlives the interrupts a terminal sends the whole process group (they only quiet its
logs, as the driver's `quiet` does before the workers close), and never outlives the driver (ended
normally, or killed with SIGKILL)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client

from mugraph.pipeline.cluster import dask_client, start_workers
from mugraph.pipeline.scheduler_process import TASK_MODULES, SchedulerProcess
from mugraph.storage.processes import pid_alive


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ignored(pid: int) -> set[int]:
    """The signals process `pid` ignores (SigIgn)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {s for s in range(1, 65) if mask & (1 << (s - 1))}
    return set()


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


@pytest.fixture(scope="module")
def running() -> Iterator[Client]:
    with dask_client(workers=1, dashboard_address=":0") as client:
        start_workers(client)
        yield client


def scheduler_pid(client: Client) -> int:
    assert client.cluster is not None
    scheduler = client.cluster.scheduler
    assert isinstance(scheduler, SchedulerProcess) and scheduler.pid is not None
    return scheduler.pid


def test_the_scheduler_is_a_child_process_of_the_driver(running: Client) -> None:
    pid = scheduler_pid(running)
    assert pid != os.getpid() and parent(pid) == os.getpid()
    assert running.run_on_scheduler(os.getpid) == pid
    worker_parents = running.run(os.getppid)
    assert list(worker_parents.values()) == [os.getpid()]  # the nannies stay in the driver's process


def imported(names: tuple[str, ...]) -> list[bool]:
    """Whether each module is imported, in the process this runs in."""
    return [n in sys.modules for n in names]


def test_the_scheduler_has_the_task_functions_module_before_any_task(running: Client) -> None:
    """The scheduler unpickles every task it is sent: the module of the driver's task functions is
    imported as the cluster starts, not on the run's first task (which waited for it). This test
    module, which the scheduler imports to run `imported`, must not import it itself."""
    from mugraph.pipeline import worker  # here only: in the driver's process, not the scheduler's

    tasks = (worker.search_task, worker.warm_task, worker.confirm_task, worker.layout_task, worker.measure_task)
    assert {f.__module__ for f in tasks} <= set(TASK_MODULES)
    deadline = time.monotonic() + 60
    while not all(running.run_on_scheduler(imported, TASK_MODULES)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(running.run_on_scheduler(imported, TASK_MODULES))
    assert all(running.run_on_scheduler(imported, ("z3", "mugraph.stages.search.explore")))


def stream_levels() -> list[int]:
    """The levels of distributed's stream handlers, in the process this runs in."""
    return [h.level for h in logging.getLogger("distributed").handlers if isinstance(h, logging.StreamHandler)]


def test_the_scheduler_outlives_the_terminals_interrupts_and_goes_quiet(running: Client) -> None:
    pid = scheduler_pid(running)
    assert {signal.SIGINT, signal.SIGTERM} & ignored(pid) == set()  # handled, not ignored
    levels = running.run_on_scheduler(stream_levels)
    assert levels and max(levels) <= logging.ERROR  # it logs errors while the run goes on
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.5)
    assert pid_alive(pid) and running.run_on_scheduler(os.getpid) == pid
    assert running.submit(sum, [1, 2], pure=False).result(timeout=60) == 3
    assert min(running.run_on_scheduler(stream_levels)) > logging.CRITICAL


def test_the_driver_quiets_the_scheduler_before_the_workers_close() -> None:
    with dask_client(workers=1, dashboard_address=":0") as client:
        assert client.cluster is not None
        scheduler = client.cluster.scheduler
        assert isinstance(scheduler, SchedulerProcess)
        assert max(client.run_on_scheduler(stream_levels)) <= logging.ERROR
        assert scheduler.quiet()  # confirmed by the process
        assert min(client.run_on_scheduler(stream_levels)) > logging.CRITICAL
        assert client.run_on_scheduler(os.getpid) == scheduler.pid  # still serving


def test_the_scheduler_exits_with_the_cluster() -> None:
    with dask_client(workers=1, dashboard_address=":0") as client:
        pid = scheduler_pid(client)
        assert pid_alive(pid)
    assert wait_gone([pid], 10) == []  # the cluster waited for it: nothing left to wait for here


DRIVER = """
import os, time
from mugraph.pipeline.cluster import dask_client, start_workers
with dask_client(workers=1, dashboard_address=":0") as client:
    start_workers(client)
    workers = client.run(os.getpid).values()
    print(client.cluster.scheduler.pid, *workers, flush=True)
    time.sleep(600)
"""


def test_a_driver_killed_with_sigkill_leaves_no_scheduler_or_worker_behind(tmp_path: Path) -> None:
    """The kernel closes the driver's end of the scheduler's pipe: the scheduler sees end of file and
    exits, and its workers with it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the killed driver's resource tracker warns of its semaphores
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and all(pid_alive(p) for p in pids), pids
        proc.kill()
        proc.wait()
        left = wait_gone(pids, 30)  # below a second on an idle machine
        assert left == [], left
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_driver_gone_before_the_scheduler_answers_gets_no_traceback() -> None:
    """A driver that gives up on the start (its Ctrl-C) closes the pipe before the scheduler has
    said its address: the process closes its scheduler and exits quietly, with nothing on the
    terminal after the driver's one line."""
    from multiprocessing import Pipe

    from mugraph.pipeline.scheduler_process import BOOTSTRAP, SchedulerSpec

    ours, theirs = Pipe()
    proc = subprocess.Popen([sys.executable, "-c", BOOTSTRAP], stdin=theirs.fileno(), stderr=subprocess.PIPE)
    theirs.close()
    ours.send(list(sys.path))
    ours.send(SchedulerSpec({"host": "127.0.0.1", "port": 0, "dashboard": False}, {}, logging.ERROR))
    ours.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode()
