"""Two runs in two threads of one process, their local clusters up at once, print nothing of Dask's on
stderr, also where the first cluster closes while the second still runs (it used to put Dask's INFO
level back, and the second's nannies then logged their closing). The script is a process of its own,
as a user's is: Dask's stream handler is there as Dask makes it, with no test harness's logging."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli_runs import settings

SCRIPT = """
import sys, threading
from pathlib import Path
from mugraph.api import OptimizeOptions, run_optimize

settings, folder = tuple(sys.argv[1:-1]), Path(sys.argv[-1])
first_up, first_done, failed = threading.Event(), threading.Event(), []


def options(name):
    return OptimizeOptions(settings=settings, workers=1, memo_url="local", store=folder / name, dashboard_address=None)


def first():
    try:
        run_optimize("rms_norm", options("a.zarr"), on_event=lambda e: e["event"] == "start" and first_up.set())
    except BaseException as e:
        failed.append(repr(e))
    finally:
        first_up.set()
        first_done.set()


def second():
    def on_event(e):
        if e["event"] == "start":
            first_done.wait(120)  # the first cluster closes while this one is up

    try:
        run_optimize("rms_norm", options("b.zarr"), on_event=on_event)
    except BaseException as e:
        failed.append(repr(e))


a = threading.Thread(target=first)
a.start()
first_up.wait(120)  # the second cluster starts after the first, which closes first
b = threading.Thread(target=second)
b.start()
a.join()
b.join()
print(failed)
"""


@pytest.mark.slow  # two clusters at once: about 13 s
def test_two_local_clusters_at_once_keep_dask_quiet(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *settings("rms_norm")[1::2], str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-3000:]
    assert (tmp_path / "a.zarr").is_dir() and (tmp_path / "b.zarr").is_dir()
    assert "distributed." not in proc.stderr and proc.stderr.strip() == "", proc.stderr[-3000:]
