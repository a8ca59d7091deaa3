"""Views that keep a value's 2-d form are the value itself: GPT-2's Conv1D flattens x to [B·S, D] for
its addmm and views the result back, and those views no longer cut the MLP into fragments around
glue. A view that changes the rows (heads split out of a projection) stays glue."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

from mugraph.ir.types import OpKind
from mugraph.stages.fragments import split_program
from mugraph.torch.capture import capture
from tests.helpers.torch_float64 import only_output
from tests.helpers.torch_models import inputs, rel_err

K = OpKind


@pytest.mark.parametrize("shape", [(16, 32), (2, 8, 32)])
def test_gpt2s_mlp_is_one_program_of_its_two_linears_and_gelu(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    mlp = GPT2MLP(128, GPT2Config(n_embd=32, activation_function="gelu_new")).half().eval()  # type: ignore[no-untyped-call]
    x = inputs(shape)
    c = capture(mlp, x)
    ops = [op.kind for op in c.lowering.graph.ops if op.kind not in (K.INPUT, K.OUTPUT)]
    assert ops == [K.MATMUL, K.ADD, K.GELU, K.MATMUL, K.ADD], c.lowering.describe()
    assert [n for n in c.lowering.glue if not n.startswith("view")] == []  # the input's view alone, if any
    assert len(split_program(c.lowering.graph).parts) <= 2  # before: five, split at the views and tanh
    got, want = only_output(c, x), mlp.double()(x[0].double())
    assert rel_err(got, want) <= 1e-9


class Heads(nn.Module):
    """A projection split into heads: the view changes what a row is."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(64, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.q(x).view(16, 2, 32))


def test_a_view_that_changes_the_rows_stays_glue() -> None:
    c = capture(Heads().half().eval(), inputs((16, 64)))
    assert "view" in c.lowering.glue and "linear" in c.lowering.lowered


class PermutedSquare(nn.Module):
    """An element-wise op on a transposed value, then a reshape torch exports as a view: torch's own
    tensor kept the permuted layout (a view of it works); the program's is contiguous (a view fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(64, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q: torch.Tensor = self.q(x).view(2, 8, 4, 16).transpose(1, 2)
        q = q * q + q
        return q.transpose(1, 2).reshape(2, 8, -1)


def test_a_glue_view_of_a_value_the_program_made_contiguous_runs() -> None:
    from mugraph.codegen import FP16_TOLERANCE
    from mugraph.torch.runtime import OptimizedModule

    torch.manual_seed(0)
    model = PermutedSquare().half().eval()
    x = inputs((2, 8, 64))
    c = capture(model, x)
    assert "view_1" in c.lowering.glue and {K.MUL, K.ADD} <= {op.kind for op in c.lowering.graph.ops}
    assert rel_err(OptimizedModule(c, c.lowering.graph)(*x), model(*x)) <= FP16_TOLERANCE


class WeightT(nn.Module):
    """Falcon's linear, `x @ self.weight.T` on a weight [out, in] (no nn.Linear), and a permute."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(128, 64) / 8)
        self.down = nn.Parameter(torch.randn(64, 128) / 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.weight.T) @ self.down.permute(1, 0)


def test_a_weights_transpose_written_out_is_read_in_place_as_a_linear_layers_is() -> None:
    from mugraph.codegen import FP16_TOLERANCE
    from mugraph.torch.runtime import OptimizedModule

    torch.manual_seed(0)
    model = WeightT().half().eval()
    x = inputs((16, 64))
    c = capture(model, x)
    assert [s.kind for s in c.lowering.inputs.values()].count("transpose") == 2 and not c.lowering.glue
    assert rel_err(OptimizedModule(c, c.lowering.graph)(*x), model(*x)) <= FP16_TOLERANCE
    assert rel_err(only_output(c, x), model.double()(x[0].double())) <= 1e-9
