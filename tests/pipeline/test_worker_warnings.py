"""Warnings raised on a worker in mugraph's code reach the shared terminal as one line each, as the
command line prints its own; other libraries' keep Python's format. On real worker processes of a
local cluster (their stderr is the driver's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import warnings
from distributed import Client, LocalCluster
from mugraph.pipeline.worker import MugraphPlugin


def warn_from_mugraph():
    from mugraph.storage.memo import layered  # a module of mugraph's: the warning names its file
    warnings.warn_explicit("memo server unavailable (test)", RuntimeWarning, layered.__file__, 1)


def warn_from_elsewhere():
    warnings.warn_explicit("someone else's warning", UserWarning, "/elsewhere/lib.py", 7)


if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as client:
            client.register_plugin(MugraphPlugin("local"))
            client.submit(warn_from_mugraph, pure=False).result()
            client.submit(warn_from_elsewhere, pure=False).result()
"""


def test_a_workers_warnings_from_mugraph_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "warns.py").write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "warns.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert "mugraph: warning: memo server unavailable (test)" in lines
    assert not any("layered.py" in ln for ln in lines)  # no file name or source line under it
    assert "/elsewhere/lib.py:7: UserWarning: someone else's warning" in lines
