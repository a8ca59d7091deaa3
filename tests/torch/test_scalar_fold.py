"""A constant times a product with a parameter is lowered as the product with the parameter scaled
in torch: the search has no scalar op to build `y * c` from, so an RMSNorm's output times 2, or a
LoRA update times alpha/r, left as mul_scalar kept the search from any μGraph of its fragment. The
module then computes what the model does; where the product has another reader, or the parameter
is larger than the product, the constant is a mul by a constant input (which the search can build)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import OpKind
from mugraph.torch.capture import capture
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import build, inputs, rel_err


class ScaledNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(64, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.normal_(1, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(x) * 2.0 + x
        return out


class ScaledLoRA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(64, 64, bias=False)
        self.lora_a, self.lora_b = nn.Linear(64, 8, bias=False), nn.Linear(8, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(x) + self.lora_b(self.lora_a(x)) / 4.0
        return out


class TwoReaders(nn.Module):
    """The product is read twice: scaling the weight would change the other reader."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) * self.w
        return y * 3.0 + y


class LargeWeight(nn.Module):
    """W [64, 256] is larger than the product [4, 256]: its scaled copy would cost more than the scale."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 256) / 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x) @ self.w) * 0.5


@pytest.mark.parametrize(
    ("cls", "shape", "folded"),
    [
        (ScaledNorm, (16, 64), {"reshape_scale": 2.0}),
        (ScaledLoRA, (16, 64), {"transpose_scale": 0.25}),
        (ScaledNorm, (2, 8, 64), {"reshape_scale": 2.0}),  # 3-d: the products on their 2-d forms
        (ScaledLoRA, (2, 8, 64), {"transpose_scale": 0.25}),
        (TwoReaders, (16, 64), {}),
        (LargeWeight, (4, 64), {}),
    ],
    ids=["norm-times-2", "lora-over-4", "norm-3d", "lora-3d", "two-readers", "large-weight"],
)
def test_a_constant_folds_into_a_parameter_no_larger_than_the_product(
    cls: type[nn.Module], shape: tuple[int, ...], folded: dict[str, float]
) -> None:
    model = build(cls)
    x = inputs(shape)
    captured = capture(model, x)
    kinds = {op.kind for op in captured.lowering.graph.ops}
    scaled = {s.kind: s.value for s in captured.lowering.inputs.values() if s.kind.endswith("_scale")}
    assert scaled == folded
    consts = [s.value for s in captured.lowering.inputs.values() if s.kind == "const"]
    assert OpKind.MUL_SCALAR not in kinds  # not folded: a mul by a constant input, which the search can build
    assert bool(consts) == (not folded) and (OpKind.MUL in kinds or not consts)
    module = OptimizedModule(captured, captured.lowering.graph)
    assert rel_err(module(*x), model(*x)) <= FP16_TOLERANCE
