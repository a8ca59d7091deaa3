"""Models with values whose size depends on the data (`nonzero`, a boolean mask's indexing, tokens routed
to experts by topk): those values, and every op reading them, stay glue that torch runs at each call's
sizes, while the ops of fixed shapes around them are lowered and searched. Python code that branches on
such a size cannot be captured at all: one line naming what depends on the data and what to do, exit
status 2 from the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.torch.capture import capture
from mugraph.torch.errors import CaptureError
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class NonzeroOut(nn.Module):
    """A GELU layer whose positive entries' indices are an output: [count, 2], count read from the data."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.gelu(self.fc(x))
        return h, torch.nonzero(h > 0)


class MaskedMean(nn.Module):
    """A GELU layer plus the mean of its entries above a threshold (`h[h > t]`: a 1-d value of any size)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc(x))
        return h - h[h > 0.1].mean()


class Routed(nn.Module):
    """A mixture of experts: a gate, top-2 routing, and each expert run on the tokens routed to it
    (`torch.where` on the routing, index, index_add_), as Mixtral-style layers are written."""

    def __init__(self, dim: int = 32, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = torch.topk(torch.softmax(self.gate(x), dim=-1), 2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return out


class Everything(nn.Module):
    """All three at once, behind a searched GELU layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32, bias=False)
        self.moe = Routed()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.gelu(self.fc(x))
        routed = self.moe(h)
        return routed - h[h > 0.1].mean(), torch.nonzero(routed > 0)


def _made(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


@pytest.mark.parametrize(
    ("cls", "lowered", "glue"),
    [
        (NonzeroOut, {"linear", "gelu"}, {"nonzero"}),
        (MaskedMean, {"linear", "gelu"}, {"index", "mean"}),
        (Routed, {"linear"}, {"topk", "where", "index", "index_add", "linear_1"}),
    ],
)
def test_data_dependent_values_stay_glue_and_the_static_ops_are_lowered(
    cls: type[nn.Module], lowered: set[str], glue: set[str]
) -> None:
    captured = capture(_made(cls), (torch.randn(16, 32),))
    assert lowered <= set(captured.lowering.lowered)
    assert glue <= set(captured.lowering.glue)


def test_a_model_with_data_dependent_sizes_is_optimised_and_runs_at_each_calls_sizes(
    tmp_path: Path,
) -> None:
    model = _made(Everything)
    fast = mugraph.optimize(model, torch.randn(16, 32), store=tmp_path / "s.zarr", **OPTIONS)
    assert fast.verdict.self_check is None and fast.kernels_off is None
    assert any(not f.kept_reference for f in fast.verdict.fragments)  # the static GELU layer was searched
    counts, loaded = set(), mugraph.load(tmp_path / "s.zarr")
    for seed in (1, 2, 3):
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(seed))
        for module in (fast, loaded):
            (got, where), (want, want_where) = module(x), model(x)
            assert torch.allclose(got, want, atol=1e-4) and torch.equal(where, want_where)
        counts.add(len(want_where))
    assert len(counts) > 1  # the nonzero output had another size at each call


class Branches(nn.Module):
    """Python skipping an expert no token was routed to: a branch on a count read from the data."""

    def __init__(self) -> None:
        super().__init__()
        self.moe = Routed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = torch.topk(torch.softmax(self.moe.gate(x), dim=-1), 2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.moe.experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            out.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return out


def test_a_branch_on_a_data_dependent_size_is_refused_in_one_line_saying_what_to_do() -> None:
    with pytest.raises(CaptureError) as e:
        capture(_made(Branches), (torch.randn(16, 32),))
    text = str(e.value)
    assert len(text.splitlines()) == 1 and f"{Path(__file__).name}:" in text
    assert "computed from the tensors' data" in text and "remove that branch" in text
    assert "mugraph.optimize(model.layer" in text and "Traceback" not in text


_MODEL_FILE = """
import torch
from tests.torch.test_data_dependent import {cls}, _made

model = _made({cls})
example_inputs = (torch.randn(16, 32),)
"""


def test_the_command_exits_2_on_a_branch_on_a_data_dependent_size(tmp_path: Path) -> None:
    (tmp_path / "branches.py").write_text(_MODEL_FILE.format(cls="Branches"))
    refused = _cli(tmp_path, "branches.py")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and "computed from the tensors' data" in refused.stderr


@pytest.mark.slow
def test_the_command_optimises_a_model_with_masked_indexing(tmp_path: Path) -> None:
    (tmp_path / "masked.py").write_text(_MODEL_FILE.format(cls="MaskedMean"))
    done = _cli(tmp_path, "masked.py", "--workers", "1", "--time-limit", "5s", "--dashboard-address", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mugraph", "optimize", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
