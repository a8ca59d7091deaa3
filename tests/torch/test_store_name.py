"""One model, one default store, whichever path runs it first: `mugraph optimize model.py` names the
program after the model's class, as `mugraph.optimize` does (it has no file to name it after), so the
call after the command reuses the finished store instead of searching again in a store of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mugraph
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, GeluLinear, build, inputs

ROOT = Path(__file__).resolve().parents[2]

MODEL_FILE = """
from tests.helpers.torch_models import GeluLinear, build, inputs

model = build(GeluLinear)
example_inputs = inputs((16, 32))
"""


def _optimize_file(cwd: Path) -> dict[str, object]:
    """`mugraph optimize gmodel.py` in `cwd`, in its default store; its done event."""
    (cwd / "gmodel.py").write_text(textwrap.dedent(MODEL_FILE))
    sets = [a for k, v in GELU_LINEAR_SETTINGS.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    proc = subprocess.run(
        [sys.executable, "-m", "mugraph.cli", "optimize", "gmodel.py", *sets, "--workers", "1", "--json"]
        + ["--dashboard-address", "none"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(proc.stdout.splitlines()[-1])
    assert isinstance(done, dict) and done["event"] == "done" and done["complete"] is True
    return done


def test_the_command_and_the_call_default_to_one_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = _optimize_file(tmp_path)
    assert str(done["store"]).startswith("runs/GeluLinear-")  # the class's name, not the file's
    monkeypatch.chdir(tmp_path)
    module = mugraph.optimize(
        build(GeluLinear),
        inputs((16, 32)),
        workers=1,
        settings=GELU_LINEAR_SETTINGS,
        verbose=False,
        dashboard_address=None,
    )
    assert module.verdict.reused and module.verdict.store == done["store"]
    assert [p.name for p in (tmp_path / "runs").glob("*.zarr")] == [Path(str(done["store"])).name]
