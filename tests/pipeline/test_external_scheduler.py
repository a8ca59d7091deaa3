"""Runs on an external Dask scheduler (real `dask scheduler` and `dask worker` processes, the real
command): one with no worker says so and waits to its time limit; one whose scheduler is killed
(kill -9) in the middle of the search ends with one line saying so, not the client's reconnection
tracebacks, and the store keeps the tasks done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mugraph.storage.run.store import RunStore
from tests.helpers.external_cluster import start_scheduler
from tests.helpers.waiting import wait_for


def _done(store: Path) -> int:
    """Tasks done in the store as a reader sees it now (0 before it exists)."""
    try:
        with RunStore.open_existing(store) as st:
            return int(st.task_summary()["done"])
    except Exception:
        return 0


def test_a_scheduler_with_no_workers_is_said_to_have_none(tmp_path: Path) -> None:
    scheduler, address = start_scheduler(tmp_path)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mugraph.cli", "optimize", "rms_norm", "--scheduler", address]
            + ["--store", str(tmp_path / "run.zarr"), "--time-limit", "3", "--dashboard-address", "none"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert "0 workers" in lines[0] and lines[1].startswith("mugraph: the scheduler has no workers yet")


def test_a_killed_scheduler_ends_the_run_with_one_line(tmp_path: Path) -> None:
    scheduler, address = start_scheduler(tmp_path)
    procs = [scheduler]
    try:
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1", "--nthreads", "1"]
        procs.append(subprocess.Popen(worker, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        err = tmp_path / "err.txt"
        store = tmp_path / "run.zarr"
        with err.open("w") as f:  # lora's whole space: minutes, so the scheduler goes in the middle
            run = subprocess.Popen(
                [sys.executable, "-m", "mugraph.cli", "optimize", "lora", "--scheduler", address]
                + ["--store", str(store), "--dashboard-address", "none"],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=f,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        procs.append(run)
        wait_for("the run's start line", lambda: "mugraph: starting" in err.read_text(), 120)
        wait_for("three tasks done", lambda: _done(store) >= 3, 120)
        scheduler.send_signal(signal.SIGKILL)
        run.wait(timeout=180)
        text = err.read_text()
        assert run.returncode == 2, text[-3000:]
        assert text.rstrip().splitlines()[-1].startswith("mugraph: error: lost the Dask scheduler at " + address)
        assert "Traceback" not in text and "distributed.client - ERROR" not in text, text[-3000:]
        assert "Batched Comm Closed" not in text and "live page was lost" not in text, text[-3000:]
        assert _done(store) >= 3
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
