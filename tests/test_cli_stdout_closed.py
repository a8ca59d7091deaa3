"""A command whose reader went away (`mugraph optimize X --json | head -2`, `mugraph check P | head -1`)
exits 141, as a shell reports a process SIGPIPE killed, never 1 (a mismatch for check and explain); a
search run stops as an interrupt stops it and says so, with how to resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli_runs import start

EXIT_STDOUT_CLOSED = 141


def test_check_into_a_closed_pipe_is_not_a_mismatch(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mugraph", "check", "rms_norm"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # closed before its first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_STDOUT_CLOSED, err
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_optimize_json_into_a_closed_pipe_stops_the_run_and_says_so(tmp_path: Path) -> None:
    store = tmp_path / "g.zarr"
    args = ["optimize", "gated_mlp", "--json", "--time-limit", "60", "--workers", "1", "--store", str(store)]
    proc = start([*args, "--dashboard-address", "none"], tmp_path)
    assert proc.stdout is not None
    assert '"event": "start"' in proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does once it has its line
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == EXIT_STDOUT_CLOSED, err
    last = err.strip().splitlines()[-1]
    assert last == "mugraph: stdout was closed, so the run stopped; run the same command to resume", err
    assert (store / "zarr.json").exists() or any(store.iterdir())
