"""The PYTHONPATH a benchmark gives the child processes that run one source tree."""

from __future__ import annotations

import os
from pathlib import Path

# Read once, when a benchmark starts: bench_pipeline sets PYTHONPATH per tree as it goes.
_INHERITED = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def tree_path(*dirs: Path) -> str:
    """`dirs` first (the tree measured wins), then the PYTHONPATH the benchmark was started with, which
    is where the dependencies live on a machine that installs them with `pip install --target`."""
    return os.pathsep.join([*map(str, dirs), *_INHERITED])
