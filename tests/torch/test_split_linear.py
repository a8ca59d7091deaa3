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


class ThreeWays(nn.Module):
    """Every piece read by an op, but the pieces with their readers exceed a fragment (seven ops): in
    separate fragments nothing fuses them, each a matmul call of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(64, 160, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b, c = self.w(x).split([32, 96, 32], dim=-1)
        return F.silu(a) * torch.relu(c).sqrt() * c, torch.exp(b).square().sqrt()


def _module(model: nn.Module, x: torch.Tensor) -> tuple[OptimizedModule, list[OpKind]]:
    captured = capture(model.half().eval(), (x,))
    ops: list[OpKind] = [op.kind for op in captured.lowering.graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]
    return OptimizedModule(captured, captured.lowering.graph), ops


@pytest.mark.parametrize("how", ["chunk", "split", "split_with_sizes"])
def test_each_piece_is_the_linear_over_its_rows(how: str) -> None:
    torch.manual_seed(0)
    model, x = FusedGateUp(how, False), torch.randn(2, 8, 64, dtype=torch.float16)
    module, ops = _module(model, x)
    assert ops.count(OpKind.MATMUL) == 3 and ops.count(OpKind.ADD) == 0
    lines = module.describe().splitlines()
    assert lines[1] == "glue run by PyTorch (0): -"  # the whole linear never runs
    assert lines[2] == "split linear layers, lowered as their pieces (1): linear"  # nor goes unnamed
    assert rel_err(module(x), float64_output(model, (x,))) <= FP16_TOLERANCE


@pytest.mark.parametrize(
    "make",
    [
        ReadWhole,
        SplitRows,
        lambda: QKVReturned(False),
        lambda: QKVReturned(True),
        OnePieceRead,
        lambda: FusedGateUp("chunk", True),
        lambda: ThreeWays(),
    ],
    ids=["read-whole", "rows", "qkv-returned", "q-scaled", "one-piece-read", "gate-up-bias", "three-fragments"],
)
def test_other_splits_stay_glue_and_compute_the_same(make: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model, x = make(), torch.randn(16, 64, dtype=torch.float16)
    module, ops = _module(model, x)
    assert ops.count(OpKind.MATMUL) == sum(isinstance(m, nn.Linear) for m in model.modules())  # each one whole
    assert "split" in module.describe().splitlines()[1]
    got, want = module(x), model(x)
    for g, w in zip(
        got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,), strict=True
    ):
        assert rel_err(g, w) <= FP16_TOLERANCE


class ScaledPiece(nn.Module):
    """A piece times a constant (folded into its rows of the weight) and added to the other: both
    pieces in one fragment, the split kept."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(64, 128, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = self.w(x).split(64, dim=-1)
        out: torch.Tensor = b * 0.5 + c
        return out


def test_a_piece_whose_scale_went_into_its_weight_is_still_read() -> None:
    torch.manual_seed(0)
    model, x = ScaledPiece(), torch.randn(16, 64, dtype=torch.float16)
    module, ops = _module(model, x)
    assert ops == [OpKind.MATMUL, OpKind.MATMUL, OpKind.ADD], module.describe()
    assert "split linear layers, lowered as their pieces (1): linear" in module.describe()
    assert rel_err(module(x), float64_output(model, (x,))) <= FP16_TOLERANCE
