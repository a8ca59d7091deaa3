"""A full disk (ENOSPC) is one line saying so (and the `--json` stream's closing `error` event), and the
store stays resumable: after space is freed the same command finishes with the same μGraphs. Runs on a
small tmpfs; skipped where mounting one is not allowed. In the slow suite."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.programs.benchmarks import rms_norm_expert
from tests.helpers.cli_runs import done, mugraph, optimize_args

# Too little for the memo server's AOF; enough to create the store but not to finish the run.
FREE_KIB = {"private": 40, "local": 80}

pytestmark = pytest.mark.slow  # mounts a filesystem (root only) and runs out of space twice: -m slow


@pytest.fixture(params=["private", "local"])
def small_disk_and_memo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A 1 MiB tmpfs with FREE_KIB left free (the file `filler` takes the rest), and the memo kind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        st = os.statvfs(disk)
        (disk / "filler").write_bytes(b"x" * (st.f_bavail * st.f_frsize - FREE_KIB[request.param] * 1024))
        yield disk, request.param
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_disk_full_is_one_line_then_the_same_command_finishes(small_disk_and_memo: tuple[Path, str]) -> None:
    small_disk, memo = small_disk_and_memo
    args = optimize_args("rms_norm", small_disk / "run.zarr", "--workers", "2", budget=40)
    if memo == "local":
        args += ["--memo-url", "local"]  # the store itself runs out of space mid-run
    full = mugraph(*args, cwd=small_disk.parent)
    lines = full.stderr.strip().splitlines()
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr[-2000:]
    closing = json.loads(full.stdout.splitlines()[-1])  # the --json stream ends with stderr's line
    assert closing["event"] == "error" and closing["exit_status"] == 2, closing
    assert closing["error"] == lines[-1].removeprefix("mugraph: error: ")
    assert lines[-1].startswith("mugraph: error: no space left on device"), lines[-3:]
    assert [line for line in lines if line.startswith("mugraph: error")] == lines[-1:]
    if memo == "private":
        return  # the memo server could not start: nothing was run yet
    assert lines[0].startswith("mugraph: starting") and "μGraphs" in lines[-2]  # it ran out of space mid-run
    (small_disk / "filler").unlink()
    last = done(mugraph(*args, cwd=small_disk.parent))
    assert last["complete"] and last["mugraphs"] == [canonical_digest(rms_norm_expert())]
