"""A fragment whose best μGraph is an identity (its output is its input: `cos(x) * 1.0`, as Llama's
rotary embedding scales by an attention scaling of 1.0) leaves a program output no op makes; the
module reads it from the input, where it once refused to build ('glue reads mul before the program
computes it'), and the verdict says no kernel runs rather than '0.00x faster'. One real run."""

from __future__ import annotations

from pathlib import Path

import torch

import mugraph
from mugraph.ir.types import OpKind


class CosSoftmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.cos(x) * 1.0, -1)  # cos and softmax are glue, the product lowered


def test_an_identity_fragment_reads_its_output_from_its_input(tmp_path: Path) -> None:
    model = CosSoftmax().eval()
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    fast = mugraph.optimize(model, (x,), store=tmp_path / "s.zarr", workers=1, dashboard_address=None, verbose=False)
    assert not [op for op in fast.program.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]  # nothing runs
    x2 = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(fast(x2), model(x2), rtol=1e-5, atol=1e-6)
    assert fast.verdict.self_check is None
    (f0,) = fast.verdict.fragments
    assert f0.kernels == 0 and f0.line().endswith("no kernel (its outputs are its inputs)")
