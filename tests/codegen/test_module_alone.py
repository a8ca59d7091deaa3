"""An emitted module imported by a user's own script, in a fresh process without TRITON_INTERPRET and
without a CUDA device: it chooses Triton's interpreter itself, and says so plainly where Triton was
imported before it in the other mode. (The other codegen tests set TRITON_INTERPRET for the whole
test process, which would hide both.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mugraph.codegen import FP16_TOLERANCE, EmitInfo, emit_module
from mugraph.ir import BlockGraph, KernelGraph
from tests.helpers.emitting import narrow_rms_norm_expert, narrow_rms_norm_reference

SCRIPT = """
import sys
{first}
import numpy as np
import expert, reference
rng = np.random.default_rng(0)
inputs = {{n: rng.uniform(-1, 1, s).astype(np.float16) for n, s in (("X", (16, 512)), ("W", (512, 768)))}}
got, want = expert.run(inputs)["O"].astype(np.float64), reference.run(inputs)["O"].astype(np.float64)
print(expert.ON_GPU, float(np.abs(got - want).max() / np.abs(want).max()))
"""


def _run(tmp_path: Path, first: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "expert.py").write_text(emit_module(narrow_rms_norm_expert(), EmitInfo("rms")))
    (tmp_path / "reference.py").write_text(emit_module(narrow_rms_norm_reference(), EmitInfo("rms")))
    (tmp_path / "use.py").write_text(SCRIPT.format(first=first))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a machine without a GPU, wherever the suite runs
    return subprocess.run(
        [sys.executable, "use.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_module_runs_its_kernels_in_the_interpreter_by_itself(tmp_path: Path) -> None:
    proc = _run(tmp_path, "")
    assert proc.returncode == 0, proc.stderr[-2000:]
    on_gpu, err = proc.stdout.split()
    assert on_gpu == "False" and 0 < float(err) <= FP16_TOLERANCE


def test_triton_imported_before_in_compiled_mode_is_said_plainly(tmp_path: Path) -> None:
    proc = _run(tmp_path, "import triton")
    assert proc.returncode != 0
    assert "ImportError: Triton was imported in this process without TRITON_INTERPRET=1" in proc.stderr
    assert "import this module before Triton" in proc.stderr


def test_run_as_a_script_it_says_what_it_takes(tmp_path: Path) -> None:
    path = tmp_path / "rms.kernels.py"
    path.write_text(emit_module(narrow_rms_norm_reference(), EmitInfo("rms")))
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == (
        "rms: run(inputs) takes float16 arrays {'X': (16, 512), 'W': (512, 768)}, gives ('O',); on a GPU: False"
    )


def _odd_tiles() -> KernelGraph:
    """rms_norm(X) @ W with N = 255 on 17 blocks: tiles of 15 columns, padded to 16 lanes."""
    g = KernelGraph()
    xd, wd = g.new_input((3, 512), name="X"), g.new_input((512, 255), name="W")
    b = BlockGraph(grid=(17, 1, 1), forloop=8)
    x, w = b.new_input(xd, imap=(-1, -1, -1), fmap=1), b.new_input(wd, imap=(1, -1, -1), fmap=0)
    b.new_output(b.div(b.accum_no_red(b.matmul(x, w)), b.accum_rms(x)), omap=(1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    return g


def test_padded_lanes_warn_of_nothing(tmp_path: Path) -> None:
    """The interpreter computes padded lanes too (0/0 before the mask): a user running the module with
    warnings as errors gets its outputs, not NumPy's 'invalid value encountered in divide'."""
    (tmp_path / "odd.py").write_text(emit_module(_odd_tiles(), EmitInfo("odd")))
    script = (
        "import numpy as np, odd\n"
        "rng = np.random.default_rng(0)\n"
        "out = odd.run({n: rng.uniform(-1, 1, s).astype(np.float16) for n, s in odd.INPUTS.items()})['O']\n"
        "print(out.shape, bool(np.isfinite(out).all()))\n"
    )
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "(3, 255) True"
