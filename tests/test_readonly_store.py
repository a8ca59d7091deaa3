"""A finished store on a read-only mount is read back (reuse writes nothing): `mugraph optimize` prints
its result and exits 0, as `run_optimize` returns it. A stopped store there cannot be resumed, and is
refused in one line before anything starts. The tests run as root, which a chmod does not stop: the
mount is made read-only for real, in a mount namespace of the command's own (`unshare`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli_runs import mugraph, settings

RO = 'mount --bind -o ro "$0" "$0" && exec "$@"'


def _read_only(directory: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` run with `directory` mounted read-only (for it alone)."""
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", RO, str(directory), *command],
        capture_output=True,
        text=True,
        cwd=directory.parent,
        timeout=300,
    )


def _mountable(directory: Path) -> None:
    """Skip where this machine cannot mount a directory read-only for one command."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command")
    probe = _read_only(directory, "sh", "-c", f"! touch {directory}/probe 2>/dev/null")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a directory read-only here: {probe.stderr.strip()[:200]}")


def _args(store: Path, *extra: str) -> list[str]:
    return ["optimize", "rms_norm", "--workers", "1", "--memo-url", "local", "--store", str(store), *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished rms_norm store alone in its directory, with no report beside it (a copied store may
    come without one: reuse on a read-only mount writes none)."""
    ro = tmp_path_factory.mktemp("finished") / "ro"
    ro.mkdir()
    _mountable(ro)
    made = mugraph(*_args(ro / "rms.zarr", *settings("rms_norm")), cwd=ro.parent)
    assert made.returncode == 0, made.stderr[-3000:]
    (ro / "rms.report.html").unlink()
    return ro / "rms.zarr"


def test_optimize_reads_a_finished_store_on_a_read_only_mount_back(finished: Path) -> None:
    ro = finished.parent
    again = _read_only(ro, sys.executable, "-m", "mugraph.cli", *_args(finished, *settings("rms_norm")))
    assert again.returncode == 0, again.stderr
    assert "reused, nothing searched" in again.stderr, again.stderr
    assert again.stdout.startswith("rms_norm: search finished"), again.stdout
    assert sorted(p.name for p in ro.iterdir()) == ["rms.zarr"]


def test_run_optimize_reads_a_finished_store_on_a_read_only_mount_back(finished: Path) -> None:
    script = (
        "import json; from pathlib import Path; from mugraph.api import OptimizeOptions, run_optimize; "
        f"o = OptimizeOptions(settings={tuple(settings('rms_norm')[1::2])!r}, "
        f"workers=1, memo_url='local', store=Path({str(finished)!r})); "
        "done = run_optimize('rms_norm', o); print(json.dumps([done['complete'], done['tasks_run'], done['report']]))"
    )
    library = _read_only(finished.parent, sys.executable, "-c", script)
    assert library.returncode == 0, library.stderr[-3000:]
    assert json.loads(library.stdout) == [True, 0, None]  # no report beside it, and none could be written


@pytest.mark.slow  # a run to its time limit: about 10 s
def test_a_stopped_store_on_a_read_only_mount_is_refused_in_one_line(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    _mountable(ro)
    store = ro / "rms.zarr"
    made = mugraph(*_args(store, "--time-limit", "1", "--dashboard-address", "none"), cwd=ro.parent)
    assert made.returncode == 0 and "stopped at the time limit" in made.stdout, made.stderr[-3000:]

    again = _read_only(ro, sys.executable, "-m", "mugraph.cli", *_args(store))
    assert again.returncode == 2 and not again.stdout, again.stderr
    line = again.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith(f"mugraph: error: --store {store}: cannot write in {ro} (Read-only file system)"), line
    assert "a stopped run is resumed in place" in line and "copy the store somewhere writable" in line, line


def test_repair_on_a_read_only_mount_says_why_and_what_to_do(finished: Path) -> None:
    """repair locks the store before it reads it (a live run's is not repaired): on a read-only mount
    that fails, said as the command's own refusal, not as a bare OSError."""
    for extra in ((), ("--dry-run",)):
        proc = _read_only(finished.parent, sys.executable, "-m", "mugraph.cli", "repair", *extra, str(finished))
        assert proc.returncode == 2 and not proc.stdout, proc.stderr
        line = proc.stderr.strip()
        assert line.startswith(f"mugraph: error: cannot repair {finished}: Read-only file system"), line
        assert "--dry-run too" in line and "copy it somewhere writable and repair the copy" in line, line
