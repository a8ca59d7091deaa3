"""A run whose terminal is closed (SIGHUP, and every later write to the terminal failing) stops as
SIGTERM stops it: exit status 130, no process of its cluster left, the store consistent, and the same
command resumes it. The terminal is a real pseudo-terminal whose other end is closed."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli_runs import mugraph

ARGS = ["optimize", "lora", "--workers", "2", "--store", "run.zarr", "--dashboard-address", "none"]


def _read_until(fd: int, text: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < deadline, seen[-2000:]
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            seen += os.read(fd, 65536)
    return seen


def _session(sid: int) -> list[str]:
    """The live processes of session `sid` (zombies aside: whoever reaps orphans here may not)."""
    out = subprocess.run(["ps", "-o", "stat=,args=", "-s", str(sid)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip() and not line.strip().startswith("Z")]


@pytest.mark.slow  # a run started, stopped, and resumed to its time limit: about 30 s
def test_a_closed_terminal_stops_a_run_that_resumes(tmp_path: Path) -> None:
    pid, fd = pty.fork()  # the child leads a session whose controlling terminal is the pty
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.chdir(tmp_path)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execv(sys.executable, [sys.executable, "-m", "mugraph", *ARGS])
        finally:
            os._exit(127)
    try:
        _read_until(fd, b"mugraph: starting lora", 120)
        time.sleep(1.5)  # mid-search
    finally:
        os.close(fd)  # the terminal goes away: SIGHUP, and its file reads EIO from now on
    started = time.monotonic()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 130
    assert time.monotonic() - started < 60
    deadline = time.monotonic() + 10
    while _session(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _session(pid) == []  # no worker, scheduler or tracker left behind

    again = mugraph(*ARGS, "--time-limit", "1", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.startswith("mugraph: resuming lora"), again.stderr[-3000:]
