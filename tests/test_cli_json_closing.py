"""`mugraph optimize --json` ends its stream with a closing event on every path: `done`, or one `error`
event carrying the line stderr gets and the exit status, for bad input (the program, an option value, an
option click does not know) and for a run that fails mid-way (a file size limit, `ulimit -f`, which also
kills mugraph's own redis-server: said as that, with why, not as the client's "Connection refused")."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mugraph.storage.memo.redis_binary import NoRedisServer, find_redis_server
from tests.helpers.cli_runs import mugraph, optimize_args, start


def _stream(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    """stderr's error line, as the `error` event carries it (without its prefix)."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("mugraph: error: ")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0].removeprefix("mugraph: error: ")


@pytest.mark.parametrize(
    ("extra", "kind", "words"),
    [
        (["no_such_program"], "input", "unknown program 'no_such_program'"),
        (["rms_norm", "--workers", "0"], "usage", "'--workers'"),
        (["rms_norm", "--no-such-flag"], "usage", "--no-such-flag"),
        (["rms_norm", "--set", "max_kernel_ops=1e400"], "input", "expected an integer"),
    ],
)
def test_bad_input_ends_the_stream_with_one_error_event(
    tmp_path: Path, extra: list[str], kind: str, words: str
) -> None:
    proc = mugraph("optimize", *extra, "--json", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert _stream(proc) == [{"event": "error", "error": _said(proc), "kind": kind, "exit_status": 2}]
    assert words in _said(proc)
    assert list(tmp_path.iterdir()) == []  # nothing created, as without --json


def test_without_json_stdout_stays_empty(tmp_path: Path) -> None:
    proc = mugraph("optimize", "no_such_program", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout


def test_a_file_size_limit_mid_run_names_the_dead_memo_server_and_the_unwritten_report(tmp_path: Path) -> None:
    """Under `ulimit -f` 8 KiB the private redis-server dies (SIGXFSZ) when its AOF reaches the limit,
    and the report, written once the result is stored, is past the limit: the stream has its start and
    progress, a `memo_lost` event whose `cause` says mugraph's own server died and why, and ends with
    `done` (the result stands; its `report` null), one warning naming the report's file error."""
    try:
        find_redis_server()
    except NoRedisServer:
        pytest.skip("no redis-server here")
    limit = 8192

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = optimize_args("rms_norm", tmp_path / "run.zarr", "--workers", "1")
    proc = subprocess.run(
        [sys.executable, "-m", "mugraph", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        preexec_fn=small_files,
    )
    events = _stream(proc)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert [e["event"] for e in events][:1] == ["start"] and "progress" in [e["event"] for e in events]
    assert events[-1]["event"] == "done" and events[-1]["complete"] and events[-1]["report"] is None
    assert "mugraph: warning: the run's report was not written (File too large)" in proc.stderr, proc.stderr
    lost = [e for e in events if e["event"] == "memo_lost"]
    assert len(lost) == 1 and lost[0]["cause"] is not None, events
    cause = lost[0]["cause"]
    assert cause.startswith("mugraph's own Redis server (pid ") and "died: killed by SIGXFSZ" in cause, cause
    assert f"`ulimit -f`, {limit:,} bytes): appendonly.aof holds {limit:,} bytes" in cause, cause
    warning = next(line for line in proc.stderr.splitlines() if "memo" in line and "warning" in line)
    assert warning.startswith(f"mugraph: warning: {cause}"), warning


@pytest.mark.slow  # a cluster started, then interrupted: about 15 s on 2 busy cores
def test_an_interrupted_run_ends_the_stream_with_its_line(tmp_path: Path) -> None:
    """Ctrl-C after the start: the stream's last event is `error` of kind `interrupted`, with the line
    stderr gets and the exit status 130."""
    proc = start(optimize_args("lora", tmp_path / "run.zarr", "--workers", "1", budget=10), tmp_path)
    assert proc.stdout is not None and proc.stderr is not None
    first = json.loads(proc.stdout.readline())
    assert first["event"] == "start", first
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches its foreground job
    out, err = proc.communicate(timeout=120)
    last = json.loads(out.splitlines()[-1])
    said = err.strip().splitlines()[-1]
    assert proc.returncode == 130 and said == "mugraph: interrupted; run the same command to resume", err[-3000:]
    closing = {"event": "error", "error": said.removeprefix("mugraph: "), "kind": "interrupted", "exit_status": 130}
    assert last == closing
