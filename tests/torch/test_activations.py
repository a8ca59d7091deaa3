"""Activations written out as arithmetic become one IR op each, found by what they compute, whatever
the spelling: GPT-2's tanh GELU (Hugging Face's NewGELU and FastGELU), BERT's erf GELU, SiLU as x ·
sigmoid(x) or x / (1 + exp(-x)). The lowered program is then evaluated in float64 against the model
in float64. What only looks like one (QuickGELU's sigmoid(1.702x), a wrong constant, a piece read
elsewhere) stays what it was."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from transformers.activations import FastGELUActivation, NewGELUActivation, QuickGELUActivation

from mugraph.ir.types import OpKind
from mugraph.torch.capture import capture
from tests.helpers.torch_float64 import only_output
from tests.helpers.torch_models import inputs, rel_err

PIECES = {OpKind.MUL_SCALAR, OpKind.MUL, OpKind.ADD, OpKind.DIV, OpKind.EXP, OpKind.SQUARE}


class Linear(nn.Module):
    """A linear layer with bias, then `act`: the activation's x is the linear's output."""

    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fc, self.act = nn.Linear(32, 64), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


def bert_gelu(h: torch.Tensor) -> torch.Tensor:
    return h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))


def cubed_gelu(h: torch.Tensor) -> torch.Tensor:
    """x*x*x for the cube, the 0.5 last, sqrt(2/pi) as a literal."""
    return h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h))) * 0.5


# name: (activation, the IR op it becomes)
WRITTEN: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], OpKind]] = {
    "NewGELUActivation": (NewGELUActivation(), OpKind.GELU),
    "FastGELUActivation": (FastGELUActivation(), OpKind.GELU),
    "x*x*x, 0.5 last": (cubed_gelu, OpKind.GELU),
    "BERT erf": (bert_gelu, OpKind.GELU_ERF),
    "x * sigmoid(x)": (lambda h: h * torch.sigmoid(h), OpKind.SILU),
    "x / (1 + exp(-x))": (lambda h: h / (1.0 + torch.exp(-h)), OpKind.SILU),
}


def kinds(model: Any, *args: torch.Tensor) -> tuple[list[OpKind], list[str]]:
    c = capture(model, args)
    ops: list[OpKind] = [op.kind for op in c.lowering.graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]
    return ops, list(c.lowering.glue)


@pytest.mark.parametrize("name", list(WRITTEN))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_written_activation_is_one_op_and_computes_the_models_values(name: str, dtype: torch.dtype) -> None:
    act, kind = WRITTEN[name]
    torch.manual_seed(0)
    model = Linear(act).to(dtype).eval()
    x = inputs((16, 32), dtype=dtype)
    c = capture(model, x)
    ops = [op.kind for op in c.lowering.graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]
    assert ops == [OpKind.MATMUL, OpKind.ADD, kind], ops  # the linear, its bias, the activation
    assert not c.lowering.glue
    got = only_output(c, x)
    want = model.double()(x[0].double())
    assert rel_err(got, want) <= 1e-9, rel_err(got, want)  # exact formulas; FastGELU's literal: 1e-11


def test_gpt2s_mlp_is_two_linears_around_one_gelu() -> None:
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

    torch.manual_seed(0)
    mlp = GPT2MLP(128, GPT2Config(n_embd=32, activation_function="gelu_new")).half().eval()  # type: ignore[no-untyped-call]
    ops, glue = kinds(mlp, *inputs((16, 32)))
    assert ops.count(OpKind.GELU) == 1 and ops.count(OpKind.MATMUL) == 2 and not PIECES & set(ops) - {OpKind.ADD}
    assert not any(g.startswith(("tanh", "pow")) for g in glue), glue  # before: both stayed glue


@pytest.mark.parametrize(
    ("name", "act"),
    [
        ("QuickGELU, x * sigmoid(1.702 x)", QuickGELUActivation()),
        ("tanh GELU with 0.04 for 0.044715", lambda h: 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.04 * h**3)))),
        ("sigmoid alone", torch.sigmoid),
    ],
)
def test_what_only_looks_like_an_activation_is_not_one(name: str, act: Callable[[torch.Tensor], torch.Tensor]) -> None:
    ops, _ = kinds(Linear(act).half().eval(), *inputs((16, 32)))
    assert not {OpKind.GELU, OpKind.GELU_ERF, OpKind.SILU} & set(ops), (name, ops)


def test_a_piece_read_elsewhere_keeps_the_pieces() -> None:
    """The tanh also leaves the model: the GELU cannot replace it, so nothing is merged."""

    def both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.tanh(0.7978845608 * (x + 0.044715 * x**3))
        return 0.5 * x * (1.0 + t), t

    ops, glue = kinds(both, *inputs((16, 32)))
    assert OpKind.GELU not in ops and any(g.startswith("tanh") for g in glue)
