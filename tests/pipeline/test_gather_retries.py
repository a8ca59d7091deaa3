"""A worker killed while it holds a finished result: distributed's client logs `Couldn't gather 1 keys,
rescheduling ...` on the driver's terminal, and gets the result again from another worker. The driver's
filter drops that line (the run goes on; what matters, no worker left, it says itself). Real `dask
scheduler` and `dask worker` processes; the worker is stopped, then killed, while the gather waits on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import os, signal, sys, threading, time
from pathlib import Path
from distributed import Client
from tests.helpers.external_cluster import start_scheduler, start_worker, stop_all

folder = Path(sys.argv[1])
s, address = start_scheduler(folder)
first = start_worker(address, folder)
procs = [s, first]
try:
    with Client(address) as client:
        if sys.argv[2] == "quiet":
            from mugraph.pipeline.lost_workers import quiet_gather_retries
            quiet_gather_retries()
        client.wait_for_workers(1)
        fut = client.submit(lambda: 42, pure=False)
        while fut.status != "finished":
            time.sleep(0.05)
        procs.append(start_worker(address, folder))
        client.wait_for_workers(2)
        os.kill(first.pid, signal.SIGSTOP)  # the scheduler still lists it, with the result on it
        threading.Timer(1.0, os.kill, (first.pid, signal.SIGKILL)).start()  # while the gather waits on it
        print("result", client.gather(fut), flush=True)
finally:
    stop_all(procs)
"""


@pytest.mark.parametrize("quiet", [False, True])
def test_a_gather_rescheduled_is_not_on_the_terminal(tmp_path: Path, quiet: bool) -> None:
    script = tmp_path / "gather.py"
    script.write_text(SCRIPT)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "quiet" if quiet else "loud"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0 and "result 42" in proc.stdout, proc.stderr[-3000:]
    # without the filter the line is there (the case is real); with it, gone
    assert ("Couldn't gather 1 keys, rescheduling" in proc.stderr) is not quiet, proc.stderr[-3000:]
