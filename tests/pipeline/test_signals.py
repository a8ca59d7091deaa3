"""Signals from the first instant the command runs: SIGINT, SIGTERM or SIGHUP (a closed terminal) while
its modules are still being imported is the same one line and status 130 as later, and so is a Ctrl-C
while the local cluster starts; once interrupted, no more worker processes are started (`--workers
1000`, then SIGTERM, stops within one batch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mugraph.pipeline.cluster import WORKER_BATCH
from mugraph.run.checks import max_workers
from tests.helpers.cli_runs import start

LINE = "mugraph: interrupted; run the same command to resume"
SIGTERM_CAUGHT = 1 << (signal.SIGTERM - 1)
SIGHUP_CAUGHT = 1 << (signal.SIGHUP - 1)


def caught(pid: int) -> int:
    """The signals the process has handlers for (SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["sigint", "sigterm", "sighup"])
def test_a_signal_while_importing_is_one_line_and_130(tmp_path: Path, sig: signal.Signals) -> None:
    proc = start(["optimize", "lora", "--workers", "1", "--store", str(tmp_path / "run.zarr")], tmp_path)
    deadline = time.monotonic() + 30
    handlers = SIGTERM_CAUGHT | SIGHUP_CAUGHT
    while caught(proc.pid) & handlers != handlers:  # the entry's handlers are in; the imports run now
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(sig)
    err = finish(proc, 60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [LINE], err
    assert list(tmp_path.iterdir()) == []  # interrupted before the store


def test_a_signal_while_importing_closes_the_json_stream(tmp_path: Path) -> None:
    """`--json`'s stream ends with one closing event on every path, this one too: the `error` event,
    as a later interrupt prints it, though the module that prints it was not loaded yet."""
    argv = ["optimize", "lora", "--json", "--workers", "1", "--store", str(tmp_path / "run.zarr")]
    proc = start(argv, tmp_path)
    deadline = time.monotonic() + 30
    while not caught(proc.pid) & SIGTERM_CAUGHT:  # the entry's handlers are in; the imports run now
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and err.strip().splitlines() == [LINE], err
    events = [json.loads(line) for line in out.splitlines()]
    assert events == [
        {"event": "error", "error": LINE.removeprefix("mugraph: "), "kind": "interrupted", "exit_status": 130}
    ]
    assert list(tmp_path.iterdir()) == []


def _workers(pgid: int) -> set[int]:
    """Worker processes (spawned by multiprocessing) in the process group."""
    out = subprocess.run(["pgrep", "-g", str(pgid), "-f", "multiprocessing.spawn"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def test_no_worker_is_started_after_an_interrupt(tmp_path: Path) -> None:
    many = str(max_workers())  # batches enough to interrupt between them
    argv = ["optimize", "lora", "--workers", many, "--store", str(tmp_path / "run.zarr"), "--dashboard-address", ":0"]
    proc = start(argv, tmp_path)
    deadline = time.monotonic() + 120
    while not _workers(proc.pid):  # the first batch is starting
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    seen: set[int] = set(_workers(proc.pid))
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.update(_workers(proc.pid))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    before = len(seen)
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    err = finish(proc, 180)
    waited = time.monotonic() - started
    stop.set()
    watcher.join()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == LINE and "Traceback" not in err, err
    # the batch being started when the signal came, and none after it
    assert len(seen) <= before + WORKER_BATCH, (before, len(seen))
    assert waited < 120, waited
    deadline = time.monotonic() + 30
    while _workers(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _workers(proc.pid)  # none left behind


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["sigint", "sigterm", "sighup-terminal-closed"]
)
def test_a_signal_to_the_process_group_mid_search_adds_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    """Workers take no part (they block SIGINT and SIGHUP; SIGTERM reaches them as a stop from their
    nanny would), nor do the scheduler's process and multiprocessing's resource tracker: the driver's
    line is the only thing added, with no empty line before it."""
    proc = start(
        [
            "optimize",
            "lora",
            "--workers",
            "2",
            "--store",
            str(tmp_path / "run.zarr"),
            "--dashboard-address",
            ":0",
            "--json",
        ],
        tmp_path,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert first.startswith("mugraph: starting"), first
    time.sleep(1.5)
    os.killpg(proc.pid, sig)
    rest = finish(proc, 120)
    lines = (first + rest).splitlines()
    assert proc.returncode == 130, rest
    assert lines[-1] == LINE, lines
    others = [line for line in lines[1:-1] if not line.startswith("tasks ")]  # progress lines
    assert others == [], lines


def test_ctrl_c_of_a_command_with_nothing_to_resume_does_not_say_resume(tmp_path: Path) -> None:
    """`check` of a program whose reference never returns: Ctrl-C ends it with "interrupted", not with
    advice to resume what has nothing to continue."""
    (tmp_path / "spin.py").write_text(
        "import sys\n\ndef reference():\n    print('spinning', file=sys.stderr, flush=True)\n"
        "    while True:\n        pass\n"
    )
    proc = start(["check", "spin.py"], tmp_path)
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == "spinning"
    os.killpg(proc.pid, signal.SIGINT)
    err = finish(proc, 60)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "mugraph: interrupted", err


def _live(pids: set[int]) -> set[int]:
    """Those of `pids` still running (zombies left for their reaper aside)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _pgrep(*args: str) -> set[int]:
    return _live({int(p) for p in subprocess.run(["pgrep", *args], capture_output=True, text=True).stdout.split()})


# Moments of the local cluster's start, each named by the driver's child that appears at it: the
# memo's redis-server (before the cluster), the scheduler's process (the cluster's own start: the
# driver waits for its address, then connects) and the first worker.
START_MOMENTS = {
    "memo server": "redis-server",
    "scheduler": "scheduler_process import serve",
    "worker": "multiprocessing.spawn",
}


@pytest.mark.parametrize("moment", list(START_MOMENTS))
def test_ctrl_c_at_any_moment_of_the_cluster_start_stops_the_run(tmp_path: Path, moment: str) -> None:
    """The process group's SIGINT (a terminal's Ctrl-C) while the cluster starts: one line, status 130
    and nothing left of the run, rather than a start that goes on as if no key were pressed."""
    store = str(tmp_path / "run.zarr")
    proc = start(["optimize", "rms_norm", "--workers", "1", "--store", store, "--dashboard-address", ":0"], tmp_path)
    deadline = time.monotonic() + 120
    while not (children := _pgrep("-P", str(proc.pid), "-f", START_MOMENTS[moment])):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGINT)
    err = finish(proc, 120)
    assert proc.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("tasks ")]
    assert lines[-1] == LINE and "Traceback" not in err, err
    deadline = time.monotonic() + 30
    while (_pgrep("-g", str(proc.pid)) or _live(children)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _pgrep("-g", str(proc.pid)) and not _live(children)  # none left behind (the memo's own session too)
