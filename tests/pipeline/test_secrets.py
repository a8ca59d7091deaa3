"""A memo URL's password is never written: not in the run store, the report, `--json` output, the
other commands' output or an error message; and the run's identity does not hold the URL at all, so a
run resumes with another memo (the memo is a cache)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mugraph.dashboards.report import report_path
from tests.helpers.cli_runs import done, mugraph, optimize_args

SECRET = "s3cr3t-pw"


@pytest.fixture(scope="module")
def guarded_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real redis-server on a free port that asks for SECRET."""
    exe = shutil.which("redis-server")
    assert exe is not None, "redis-server is part of the test environment (scripts/bootstrap.sh)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    data = tmp_path_factory.mktemp("redis")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", SECRET, "--save", "", "--dir", str(data)]
    proc = subprocess.Popen([*args, "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, password=SECRET)
    try:
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield port
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and text.encode() in p.read_bytes()]


def test_the_password_is_written_nowhere(guarded_redis: int, tmp_path: Path) -> None:
    url = f"redis://:{SECRET}@127.0.0.1:{guarded_redis}/0"
    store = tmp_path / "run.zarr"
    proc = mugraph(*optimize_args("lora", store, "--workers", "2", "--memo-url", url), cwd=tmp_path)
    last = done(proc)
    assert last["complete"] and SECRET not in proc.stdout + proc.stderr
    assert files_holding(tmp_path, SECRET) == []  # the store, its memo directory, the report
    assert f"redis://:***@127.0.0.1:{guarded_redis}/0" in report_path(store).read_text()
    for argv in (["status", str(store), "--json"], ["show", str(store), "--json"], ["report", str(store)]):
        out = mugraph(*argv, cwd=tmp_path)
        assert out.returncode == 0 and SECRET not in out.stdout + out.stderr, argv
    # the identity does not hold the memo URL: the same run resumes (here: is found finished) with none
    again = done(mugraph(*optimize_args("lora", store, "--workers", "1", "--memo-url", "local"), cwd=tmp_path))
    assert again["complete"] and again["tasks_run"] == 0 and again["mugraphs"] == last["mugraphs"]


def test_an_unreachable_memo_is_refused_without_its_password(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # nothing listens there once the socket is closed
    url = f"redis://alice:{SECRET}@127.0.0.1:{port}/0"
    proc = mugraph(*optimize_args("lora", tmp_path / "run.zarr", "--memo-url", url), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr and f"redis://alice:***@127.0.0.1:{port}/0" in proc.stderr
    assert not (tmp_path / "run.zarr").exists()


@pytest.mark.parametrize("given", ["wrong-pw", None])
def test_a_refused_password_is_said_so_not_that_the_server_is_down(
    tmp_path: Path, guarded_redis: int, given: str | None
) -> None:
    """The server answers and refuses a wrong or missing password: 'start it' would send the user to a
    server that is running."""
    url = f"redis://:{given}@127.0.0.1:{guarded_redis}/0" if given else f"redis://127.0.0.1:{guarded_redis}/0"
    proc = mugraph(*optimize_args("lora", tmp_path / "run.zarr", "--memo-url", url), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "refuses the run's credentials" in proc.stderr and "start it" not in proc.stderr, proc.stderr
    assert "wrong-pw" not in proc.stderr and not (tmp_path / "run.zarr").exists()
