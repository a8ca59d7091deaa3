"""`mugraph optimize` as a subprocess, its NDJSON events, the narrowed limits of the pipeline tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.narrow import NARROW


def as_from_a_terminal() -> None:
    """A child's `preexec_fn`: it takes Ctrl-C as a terminal's foreground job does, even where this
    suite runs as a background job of a non-interactive shell (which starts it with SIGINT ignored,
    and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], cwd: Path, stderr: int = subprocess.PIPE) -> subprocess.Popen[str]:
    """`python -m mugraph ARGS` in its own session (a process group to signal), unbuffered, taking
    Ctrl-C as from a terminal; stdout piped, stderr piped unless given (DEVNULL, for a run of minutes
    whose unread progress lines would fill the pipe)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mugraph", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=as_from_a_terminal,
    )


def settings(name: str) -> list[str]:
    out = []
    for key, value in NARROW[name].items():
        out += ["--set", f"{key}={json.dumps(value)}"]
    return out


def optimize_args(name: str, store: Path, *extra: str, budget: int = 40, dashboard: str = "none") -> list[str]:
    """`optimize NAME` narrowed, with `--json`; with no dashboard unless one is asked for (":0": a free
    port), since a run's scheduler with one imports Bokeh, a second of CPU per run the suite rarely reads."""
    return [
        "optimize",
        name,
        *settings(name),
        "--store",
        str(store),
        "--budget",
        str(budget),
        "--json",
        "--dashboard-address",
        dashboard,
        *extra,
    ]


def mugraph(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mugraph.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def done(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    last = events(proc)[-1]
    assert last["event"] == "done", last
    return last
