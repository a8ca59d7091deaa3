"""What the driver says of its cluster in the middle of a run, on real `dask scheduler`/`dask worker`
processes and a real redis-server: every worker gone (kill -9) is said once, and their return; a shared
memo that goes away is said by the driver, once, on an external cluster (whose workers' logs the user
may never read) and on the local one (whose workers share its terminal: one line, not two)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from mugraph.storage.memo.redis_server import EmbeddedRedis
from tests.helpers.external_cluster import json_events, start_optimize, start_scheduler, start_worker, stop_all
from tests.helpers.waiting import wait_for

KEY = {"MUGRAPH_MEMO_KEY": "k" * 32}
UNAVAILABLE = "memo server unavailable, continuing with the local memo"


def _lora(folder: Path, *extra: str) -> list[str]:
    """lora's whole space: minutes on one worker, so the run is in its middle for as long as a test needs."""
    return ["optimize", "lora", "--store", str(folder / "run.zarr"), "--dashboard-address", "none", "--json", *extra]


def _tasks_done(folder: Path) -> int:
    return max((int(e["tasks_done"]) for e in json_events(folder) if e.get("event") == "progress"), default=0)  # type: ignore[call-overload]


def _stopped(run: subprocess.Popen[bytes]) -> int:
    """Interrupt the run (as Ctrl-C does) and its exit status."""
    run.send_signal(signal.SIGINT)
    return run.wait(timeout=120)


# slow: on a loaded machine (the whole suite in two processes) the line saying a worker joined again
# was not seen within 120 s in one run of two; alone, and with three busy processes beside it, it holds
@pytest.mark.slow
def test_every_worker_leaving_is_said_once_and_their_return(tmp_path: Path) -> None:
    scheduler, address = start_scheduler(tmp_path)
    procs = [scheduler]
    err = tmp_path / "err.txt"
    try:
        worker = start_worker(address, tmp_path)
        procs.append(worker)
        run = start_optimize(_lora(tmp_path, "--scheduler", address), tmp_path)
        procs.append(run)
        wait_for("a search task done", lambda: _tasks_done(tmp_path) >= 1, 180)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        wait_for("the line saying no worker is left", lambda: "every worker has left" in err.read_text(), 120)
        procs.append(start_worker(address, tmp_path))
        wait_for("the line saying a worker joined", lambda: "1 worker joined" in err.read_text(), 120)
        assert _stopped(run) == 130, err.read_text()[-3000:]
    finally:
        stop_all(procs)
    text = err.read_text()
    assert text.count("every worker has left the scheduler") == 1, text[-3000:]
    assert "the tasks wait until one joins (start one with `dask worker SCHEDULER-ADDRESS`" in text
    said = [e for e in json_events(tmp_path) if e.get("event") == "workers"]
    assert [e["workers"] for e in said] == [0, 1]
    assert all(set(e) == {"event", "workers", "seconds"} for e in said)
    assert "Couldn't gather" not in text and "distributed.client" not in text, text[-3000:]


def _memo_lost(folder: Path, redis: EmbeddedRedis, run: subprocess.Popen[bytes]) -> str:
    """Kill the memo's redis-server once the run has done a few tasks; stderr once the driver said so
    and the run was interrupted a few seconds later (time for a second line, were there one)."""
    wait_for("three search tasks done", lambda: _tasks_done(folder) >= 3, 180)
    redis_pid = redis.pid
    subprocess.run(["kill", "-9", str(redis_pid)], check=True)
    err = folder / "err.txt"
    wait_for("the driver's line on the memo", lambda: UNAVAILABLE in err.read_text(), 60)
    done_then = _tasks_done(folder)
    wait_for("two more tasks done", lambda: _tasks_done(folder) >= done_then + 2, 60)
    assert _stopped(run) == 130, err.read_text()[-3000:]
    return err.read_text()


def test_a_memo_lost_on_an_external_cluster_is_said_by_the_driver(tmp_path: Path) -> None:
    scheduler, address = start_scheduler(tmp_path)
    procs = [scheduler]
    redis = EmbeddedRedis(tmp_path / "redis").start()
    try:
        log = tmp_path / "worker.log"
        procs.append(start_worker(address, tmp_path, KEY, log=log))
        run = start_optimize(_lora(tmp_path, "--scheduler", address, "--memo-url", redis.url), tmp_path, KEY)
        procs.append(run)
        text = _memo_lost(tmp_path, redis, run)
    finally:
        stop_all(procs)
        redis.stop()
    lines = [ln for ln in text.splitlines() if UNAVAILABLE in ln]
    assert len(lines) == 1 and lines[0].startswith(f"mugraph: warning: {UNAVAILABLE}: "), text[-3000:]
    assert UNAVAILABLE in log.read_text()  # the worker's own log says it too, as before
    said = [e for e in json_events(tmp_path) if e.get("event") == "memo_lost"]
    assert len(said) == 1 and set(said[0]) == {"event", "worker", "error", "cause"} and "k" * 32 not in str(said[0])
    assert said[0]["cause"] is None  # a server this run did not start: its death is not the run's to explain


def test_a_memo_lost_on_the_local_cluster_is_one_line(tmp_path: Path) -> None:
    redis = EmbeddedRedis(tmp_path / "redis").start()
    try:
        run = start_optimize(_lora(tmp_path, "--workers", "1", "--memo-url", redis.url), tmp_path, KEY)
        try:
            text = _memo_lost(tmp_path, redis, run)
        finally:
            stop_all([run])
    finally:
        redis.stop()
    lines = [ln for ln in text.splitlines() if UNAVAILABLE in ln]
    assert len(lines) == 1 and "(worker " in lines[0], text[-3000:]  # the driver's, not the worker's as well
    assert len([e for e in json_events(tmp_path) if e.get("event") == "memo_lost"]) == 1
