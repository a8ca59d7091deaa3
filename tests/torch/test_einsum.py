"""An einsum that is a matmul by a matrix is lowered as one (the matrix as it is, or transposed in place
as a linear layer's weight is); any other einsum stays glue, computed by PyTorch as written."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import OpKind
from mugraph.torch.capture import capture
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import float64_output, rel_err


class Einsum(nn.Module):
    def __init__(self, equation: str, w_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.equation = equation
        self.w = nn.Parameter(torch.randn(*w_shape) * 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.einsum(self.equation, x, self.w))


@pytest.mark.parametrize(
    "equation, x_shape, w_shape, matmuls",
    [
        ("bsd,df->bsf", (2, 8, 64), (64, 32), 1),
        ("bsd,fd->bsf", (2, 8, 64), (32, 64), 1),  # the weight as nn.Linear keeps it
        ("...d,df->...f", (2, 8, 64), (64, 32), 1),
        ("ij,jk->ik", (16, 64), (64, 32), 1),
        ("bsd,df->bfs", (2, 8, 64), (64, 32), 0),  # the output permuted: not a matmul
        ("bsd,bdf->bsf", (2, 8, 64), (2, 64, 32), 0),  # batched operands: glue here
    ],
)
def test_an_einsum_that_is_a_matmul_is_lowered(
    equation: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], matmuls: int
) -> None:
    torch.manual_seed(0)
    model, x = Einsum(equation, w_shape).half().eval(), torch.randn(*x_shape, dtype=torch.float16)
    captured = capture(model, (x,))
    kinds = [op.kind for op in captured.lowering.graph.ops] if matmuls else []
    assert kinds.count(OpKind.MATMUL) == matmuls
    assert ("einsum" in captured.lowering.glue) == (matmuls == 0)
    if matmuls:
        module = OptimizedModule(captured, captured.lowering.graph)
        assert rel_err(module(x), float64_output(model, (x,))) <= FP16_TOLERANCE
