"""A linear layer whose output is split along its last dim (a SwiGLU's gate and up projections in one
`nn.Linear`, then `chunk`, as Phi-3 and transformers' MoE experts write it) is lowered piece by piece:
each piece the linear over its rows of the weight and bias, so the search can fuse it with what reads
it; the whole linear and the split are never run. Only where every piece has a reader in the program: a
piece only returned leaves the linear whole (one call, as the model makes it). Other splits stay glue,
computed as before."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import OpKind
from mugraph.torch.capture import capture
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import float64_output, rel_err


class FusedGateUp(nn.Module):
    def __init__(self, how: str, bias: bool) -> None:
        super().__init__()
        self.how = how
        self.w12 = nn.Linear(64, 256, bias=bias)
        self.w3 = nn.Linear(128, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w12(x)
        if self.how == "chunk":
            a, b = h.chunk(2, dim=-1)
        elif self.how == "split":
            a, b = h.split(128, dim=-1)
        else:
            a, b = torch.split(h, [128, 128], dim=2)
        out: torch.Tensor = self.w3(F.silu(a) * b)
        return out


class ReadWhole(nn.Module):
    """The linear's output is also read whole: it is lowered whole, its split stays glue."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(64, 128, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.w(x)
        a, b = h.chunk(2, dim=-1)
        return a * b, h


class SplitRows(nn.Module):
    """Split along the rows (not the last dim): glue."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(64, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.w(x).chunk(2, dim=0)
        out: torch.Tensor = a + b
        return out


class QKVReturned(nn.Module):
    """An attention's fused projection, its pieces returned (or viewed as heads by glue): split, they
    would be three matmul calls where the model makes one."""

    def __init__(self, scaled: bool) -> None:
        super().__init__()
        self.scaled = scaled
        self.qkv = nn.Linear(64, 96, bias=scaled)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = self.qkv(x).split((64, 16, 16), dim=-1)
        return (q * 0.125 if self.scaled else q), k, v


class OnePieceRead(nn.Module):
    """One piece read by an op, the other only returned: the linear stays whole."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(64, 128, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.w(x).chunk(2, dim=-1)
        return F.silu(a), b


def _module(model: nn.Module, x: torch.Tensor) -> tuple[OptimizedModule, list[OpKind]]:
    captured = capture(model.half().eval(), (x,))
    ops: list[OpKind] = [op.kind for op in captured.lowering.graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]
    return OptimizedModule(captured, captured.lowering.graph), ops


@pytest.mark.parametrize("how", ["chunk", "split", "split_with_sizes"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_each_piece_is_the_linear_over_its_rows(how: str, bias: bool) -> None:
    torch.manual_seed(0)
    model, x = FusedGateUp(how, bias), torch.randn(2, 8, 64, dtype=torch.float16)
    module, ops = _module(model, x)
    assert ops.count(OpKind.MATMUL) == 3 and ops.count(OpKind.ADD) == (2 if bias else 0)
    lines = module.describe().splitlines()
    assert lines[1] == "glue run by PyTorch (0): -"  # the whole linear never runs
    assert lines[2] == "split linear layers, lowered as their pieces (1): linear"  # nor goes unnamed
    assert rel_err(module(x), float64_output(model, (x,))) <= FP16_TOLERANCE


@pytest.mark.parametrize(
    "make",
    [ReadWhole, SplitRows, lambda: QKVReturned(False), lambda: QKVReturned(True), OnePieceRead],
    ids=["read-whole", "rows", "qkv-returned", "q-scaled", "one-piece-read"],
)
def test_other_splits_stay_glue_and_compute_the_same(make: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model, x = make(), torch.randn(16, 64, dtype=torch.float16)
    module, ops = _module(model, x)
    assert ops.count(OpKind.MATMUL) == 1
    assert "split" in module.describe().splitlines()[1]
    got, want = module(x), model(x)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,), strict=True
    ):
        assert rel_err(g, w) <= FP16_TOLERANCE
