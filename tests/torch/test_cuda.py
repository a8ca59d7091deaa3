"""The drop-in module on a CUDA device: Triton compiles its kernels for the GPU, and the module runs on
CUDA tensors. Each check runs in a fresh process without TRITON_INTERPRET (this test process runs the
interpreter, chosen in conftest.py), from `cuda_child.py`. Runs with `-m gpu` on a CUDA machine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or importlib.util.find_spec("triton") is None,
        reason="needs a CUDA device and Triton",
    ),
]


def child(*args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.torch.cuda_child", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-4000:]


def test_a_fused_product_compiles_and_computes_torchs_product_in_every_dtype() -> None:
    child("fused_product")


def test_predefined_ops_on_the_gpu_keep_their_dtype_and_the_float32_results() -> None:
    child("predefined")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_optimize_on_the_gpu_gives_a_module_of_compiled_kernels(dtype: str, tmp_path: Path) -> None:
    child("optimize", dtype, str(tmp_path / f"gelu-{dtype}.zarr"))


def test_a_cpu_model_on_a_cuda_machine_is_refused_before_the_search(tmp_path: Path) -> None:
    child("refuse", str(tmp_path / "never.zarr"))
