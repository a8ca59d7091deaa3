"""The verdict's fragments-together line names what no fragment holds, and only that: a program whose
fragments hold every op (two exps on one path: two fragments, no glue) is "the whole program", never
"not priced: ops outside the fragments"; ops copied between fragments are named by kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.dashboards.console import verdict_lines
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps
from tests.helpers.cli_runs import mugraph


def _two_fragments(relu: bool) -> str:
    g = KernelGraph()
    x = g.new_input((16, 64), "float16", "x")
    w = g.new_input((64, 64), "float16", "w")
    y = g.exp(g.matmul(x, w))
    z = g.exp(g.matmul(g.relu(y) if relu else y, w))
    g.mark_output(z, "y")
    return dumps(g)


def _said(tmp_path: Path, relu: bool) -> list[str]:
    """The verdict's fragments-together lines of a run stopped at once (its references are ranked)."""
    name = f"relu{relu}.json"
    (tmp_path / name).write_text(_two_fragments(relu))
    args = ["optimize", name, "--workers", "1", "--memo-url", "local", "--time-limit", "1"]
    proc = mugraph(*args, "--store", str(tmp_path / f"{name}.zarr"), "--dashboard-address", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line.strip() for line in proc.stdout.splitlines() if "fragments together" in line]


@pytest.mark.slow  # two runs of a cluster each: about 25 s on 2 busy cores
def test_a_program_without_glue_is_priced_whole(tmp_path: Path) -> None:
    whole = _said(tmp_path, relu=False)
    assert len(whole) == 1 and whole[0].startswith("fragments together (the whole program): "), whole
    assert "not priced" not in whole[0]
    (between,) = _said(tmp_path, relu=True)
    assert between.endswith("; not priced: ops between fragments (relu)"), between


def _done() -> dict[str, object]:
    rows = {
        n: {"digest": n * 64, "estimated_seconds": 2e-6, "speedup": 1.0, "kernels": 1, "reference": True}
        for n in ("a", "b")
    }
    return {
        "event": "done", "program": "p", "store": "p.zarr", "complete": True, "mugraphs": [], "tasks_run": 1,
        "tasks_done": 1, "states": 4, "solver_calls": 2, "seconds": 1.0, "measured": {},
        "ranking": {"f0": [], "f1": []}, "reference": {"f0": rows["a"], "f1": rows["b"]},
        "best_per_fragment": {"f0": "a" * 64, "f1": "b" * 64},
    }  # fmt: skip


def test_what_no_fragment_holds_is_named_where_known() -> None:
    def together(*outside: str) -> str:
        lines = verdict_lines(_done(), "H100", *outside)
        return next(line.strip() for line in lines if "fragments together" in line)

    assert together("").startswith("fragments together (the whole program): ")
    assert together("ops between fragments (relu)").endswith("; not priced: ops between fragments (relu)")
    assert together().endswith("; not priced: ops outside the fragments")  # a caller that does not know


MODEL = """
import torch
from torch import nn


class TwoExp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(64, 64) * 0.01)
        self.w2 = nn.Parameter(torch.randn(64, 64) * 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(torch.exp(x @ self.w1) @ self.w2)


model = TwoExp().eval()
example_inputs = (torch.randn(16, 64),)
"""


@pytest.mark.slow  # a model captured, then a run of a cluster: about 15 s on 2 busy cores
def test_a_model_without_glue_is_priced_whole(tmp_path: Path) -> None:
    """A PyTorch model whose every op lowers into its two fragments leaves nothing to PyTorch."""
    pytest.importorskip("torch")
    (tmp_path / "twoexp_model.py").write_text(MODEL)
    args = ["optimize", "twoexp_model.py", "--workers", "1", "--memo-url", "local", "--time-limit", "1"]
    proc = mugraph(*args, "--store", str(tmp_path / "run.zarr"), "--dashboard-address", "none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line.strip() for line in proc.stdout.splitlines() if "fragments together" in line]
    assert len(said) == 1 and said[0].startswith("fragments together (the whole program): "), proc.stdout
