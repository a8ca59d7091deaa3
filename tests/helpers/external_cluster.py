"""A Dask cluster of one's own for tests: a real `dask scheduler` and `dask worker` processes, as a user
starts them beside `mugraph optimize --scheduler`, and the command run against it with its stdout and
stderr in files (read while it runs)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.helpers.cli_runs import as_from_a_terminal
from tests.helpers.waiting import wait_for


def start_scheduler(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A `dask scheduler` on a free port; (its process, its address)."""
    sched_file = folder / "scheduler.json"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(sched_file)]
        + ["--port", "0", "--dashboard-address", ":0"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for("the scheduler's address file", sched_file.exists, 60)
    return scheduler, json.loads(sched_file.read_text())["address"]


def start_worker(
    address: str, folder: Path, env: Mapping[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """One single-thread `dask worker` with no nanny (one process: a kill -9 ends it for good), its log
    in `log` if given."""
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", address]
            + ["--nworkers", "1", "--nthreads", "1", "--no-nanny"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, **(env or {})},
        )
    finally:
        if log is not None and not isinstance(out, int):
            out.close()


def start_optimize(args: list[str], folder: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`mugraph ARGS` with stdout in folder/out.txt and stderr in folder/err.txt, in its own session."""
    with (folder / "out.txt").open("wb") as out, (folder / "err.txt").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "mugraph", *args],
            cwd=folder,
            stdout=out,
            stderr=err,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            preexec_fn=as_from_a_terminal,
        )


def json_events(folder: Path) -> list[dict[str, object]]:
    """The NDJSON events the run printed so far (a line cut short at the end left out)."""
    out = []
    for line in (folder / "out.txt").read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate what still runs, last started first."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
