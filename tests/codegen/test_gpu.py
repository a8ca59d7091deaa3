"""The emitted modules compiled by Triton on a CUDA device (`mugraph emit --check --time` in a fresh
process: this test process runs Triton's interpreter). Runs with `-m gpu` on a CUDA machine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from mugraph.arrays.backend import cupy_available
from mugraph.programs import builtin_programs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not cupy_available() or importlib.util.find_spec("triton") is None,
        reason="needs CuPy with a usable CUDA device, and Triton",
    ),
]

CASES = [(name, label) for name, prog in sorted(builtin_programs().items()) for label in ("reference", *prog.experts)]


def emit_json(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-m", "mugraph.cli", "emit", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    return proc, (json.loads(lines[-1]) if lines else {})


@pytest.mark.parametrize(("name", "label"), CASES)
def test_compiled_module_matches_the_reference_and_is_timed(name: str, label: str) -> None:
    proc, result = emit_json(name, "--expert", label, "--check", "--time")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result["ok"] is True and result["interpreted"] is False, result
    assert isinstance(result["median_seconds"], float) and result["median_seconds"] > 0
    timing = result["timing"]
    assert isinstance(timing, dict) and timing["repeats"] >= 20 and timing["min_seconds"] <= timing["median_seconds"]
