"""A user's script calling `mugraph.optimize` at its top level, with no `if __name__ == "__main__"` guard,
runs once: the spawned Dask workers do not run it again."""

from __future__ import annotations

import multiprocessing.spawn
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mugraph.run.setup import main_not_rerun
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def test_spawned_processes_are_not_told_to_run_the_main_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """What multiprocessing hands a spawned process names the main script or module outside the
    context (a user's script here), and neither inside it; the main module is as it was after."""
    main = sys.modules["__main__"]
    if getattr(main, "__spec__", None) is None:  # a pytest-xdist worker's main names no file: give it one
        monkeypatch.setattr(main, "__file__", str(ROOT / "script.py"), raising=False)
    before = (getattr(main, "__file__", None), main.__spec__)
    keys = {"init_main_from_path", "init_main_from_name"}
    assert keys & set(multiprocessing.spawn.get_preparation_data("t"))
    with main_not_rerun():
        assert not keys & set(multiprocessing.spawn.get_preparation_data("t"))
    assert (getattr(main, "__file__", None), main.__spec__) == before


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_once(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(f"""
        from pathlib import Path
        import mugraph
        from tests.helpers.torch_models import GeluLinear, build, inputs

        with open(Path(__file__).with_name("runs.txt"), "a") as f:
            f.write("ran\\n")
        fast = mugraph.optimize(build(GeluLinear), inputs((16, 32)), store="s.zarr", workers=2,
                                settings={GELU_LINEAR_SETTINGS!r}, dashboard_address=None)
        print("OK", type(fast).__name__)
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "OK OptimizedModule"
    assert (tmp_path / "runs.txt").read_text() == "ran\n"


def test_a_model_file_that_imports_triton_first_still_gets_the_interpreter(tmp_path: Path) -> None:
    """`mugraph optimize model.py` where model.py imports what imports Triton (transformers' modeling
    modules do) before mugraph could choose Triton's interpreter: the loader imports mugraph.torch
    before it runs the file, so the choice is made in time (on a machine without a CUDA device)."""
    (tmp_path / "model.py").write_text(
        "import triton  # as transformers' modeling modules do\n"
        "import torch\n\n"
        "model = torch.nn.Linear(64, 32).eval()\n"
        "example_inputs = (torch.randn(16, 64),)\n"
    )
    code = (
        "import sys\n"
        "from mugraph.programs import resolve_program\n"
        "resolve_program('model.py')\n"
        "import mugraph.torch, torch\n"
        "print(torch.cuda.is_available() or not mugraph.torch.TRITON_IMPORTED_TOO_EARLY)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**env, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"
