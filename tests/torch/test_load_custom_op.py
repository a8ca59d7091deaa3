"""A store's exported program that calls a library's custom op (transformers registers its MoE experts'
`grouped_mm_fallback` so) cannot be read where that library was not imported: `load_exported` says
which op is missing and what to do, where torch says only to read the warnings it logged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SAVE = """
import sys, torch
from mugraph.torch.archive import archive_digest

@torch.library.custom_op("mgtest::scaled", mutates_args=())
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2

@scaled.register_fake
def _(x):
    return torch.empty_like(x)

class M(torch.nn.Module):
    def forward(self, x):
        return scaled(x) + 1

ep = torch.export.export(M(), (torch.randn(4, 8),))
ep.example_inputs = None  # as mugraph saves it: no pickled sample inputs
torch.export.save(ep, sys.argv[1])
print(archive_digest(__import__("pathlib").Path(sys.argv[1])))
"""

LOAD = """
import sys
from pathlib import Path
from mugraph.torch.capture import load_exported
from mugraph.torch.errors import CaptureError
try:
    load_exported(Path(sys.argv[1]), "m", sys.argv[2])
except CaptureError as e:
    print(e)
"""


def run(code: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # a run and a load in new processes: about 15 s
def test_an_unregistered_custom_op_is_named(tmp_path: Path) -> None:
    archive = tmp_path / "m.torch.pt2"
    digest = run(SAVE, str(archive))
    said = run(LOAD, str(archive), digest)  # a fresh process: mgtest::scaled is not registered there
    assert "it calls torch.ops.mgtest.scaled" in said and "namespace 'mgtest'" in said, said
    assert "import that library" in said
