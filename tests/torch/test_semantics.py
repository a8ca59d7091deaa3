"""The captured program means what PyTorch computes: each lowered op (erf and tanh GELU, rms_norm with
eps and weight, softmax, linear with bias, scalar operands, fp16 and bf16) is evaluated by mugraph's
float64 interpreter and compared with torch's own float64 output of the same model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mugraph.ir.types import OpKind
from mugraph.stages.verify.algebra import Float64Algebra
from mugraph.stages.verify.interpret import evaluate
from mugraph.torch.capture import Captured, capture
from tests.helpers.torch_models import GeluMLP, RMSNorm, build, float64_output, inputs, rel_err, rms_norm


def program_in_float64(c: Captured, args: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """The lowered program's outputs, by fx node name, evaluated in float64 by mugraph's interpreter
    on the model's inputs and parameters widened to float64 (a model whose glue reads only inputs)."""
    ep = c.exported
    sig = ep.graph_signature
    env: dict[str, torch.Tensor] = {n: a.double() for n, a in zip(sig.user_inputs, args, strict=True)}
    env.update({ph: ep.state_dict[fqn].double() for ph, fqn in sig.inputs_to_parameters.items()})
    nodes = {n.name: n for n in ep.graph.nodes}

    def glue(name: str) -> torch.Tensor:  # a glue op over the inputs (a transpose), run by torch in float64
        if name not in env:
            node = nodes[name]
            args = torch.fx.node.map_arg(node.args, lambda a: glue(a.name))
            env[name] = node.target(*args, **node.kwargs)
        return env[name]

    arrays = []
    for name, _, _ in c.lowering.graph.input_signature():
        src = c.lowering.inputs[name]
        value = glue(src.node) if src.node is not None else torch.full(src.shape, src.value, dtype=torch.float64)
        if src.kind == "transpose":
            made = value.t()
        elif src.kind == "reshape":
            made = value.reshape(src.shape)
        elif src.kind == "scale":
            made = value * src.value
        else:
            made = value
        arrays.append(made.detach().numpy())
    outs = evaluate(Float64Algebra(np), c.lowering.graph, arrays)
    names = [str(op.attr("name")) for op in c.lowering.graph.ops_of(OpKind.OUTPUT)]
    return {n: torch.from_numpy(o) for n, o in zip(names, outs, strict=True)}


def only_output(c: Captured, args: tuple[torch.Tensor, ...]) -> torch.Tensor:
    outs = program_in_float64(c, args)
    assert len(outs) == 1, outs.keys()
    return next(iter(outs.values()))


class Gelu(nn.Module):
    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ x.t(), approximate=self.approximate)


FUNCTIONS: dict[str, tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]] = {
    "softmax": (lambda x, y: torch.softmax(x @ y, dim=-1), ((8, 16), (16, 32))),
    "scalars": (lambda x, y: (2.0 - x / 4.0 + 0.5 * y - (-x)) * 3.0, ((8, 16), (8, 16))),
    "mean_sum": (lambda x: x.mean(-1, keepdim=True) + x.sum(0, keepdim=True), ((8, 16),)),
    "cat_relu": (lambda x, y, w: torch.relu(torch.cat([x, y], dim=1)) @ w, ((8, 16), (8, 16), (32, 8))),
    "rms_norm": (rms_norm, ((8, 64), (64,))),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_functions_mean_what_torch_computes(name: str, dtype: torch.dtype) -> None:
    fn, shapes = FUNCTIONS[name]
    args = inputs(*shapes, dtype=dtype)
    c = capture(fn, args)
    assert c.lowering.lowered and all(
        t.dtype.value == str(dtype).removeprefix("torch.") for t in c.lowering.graph.tensors
    )
    assert rel_err(only_output(c, args), float64_output(fn, args)) < 1e-12


@pytest.mark.parametrize("approximate, kind", [("none", OpKind.GELU_ERF), ("tanh", OpKind.GELU)])
def test_gelu_forms_are_distinct_ops(approximate: str, kind: OpKind) -> None:
    model = Gelu(approximate).half().eval()
    args = inputs((8, 16))
    c = capture(model, args)
    kinds = {op.kind for op in c.lowering.graph.ops}
    assert kind in kinds and ({OpKind.GELU, OpKind.GELU_ERF} - {kind}).isdisjoint(kinds)
    assert rel_err(only_output(c, args), float64_output(model, args)) < 1e-12
    # the other form differs by far more than float64 rounding: the check above tells them apart
    other = F.gelu(args[0].double() @ args[0].double().t(), approximate="tanh" if approximate == "none" else "none")
    assert rel_err(only_output(c, args), other) > 1e-6


@pytest.mark.parametrize(
    "make_model, shapes",
    [(lambda: RMSNorm(64), ((16, 64),)), (GeluMLP, ((16, 64),))],
    ids=["rmsnorm-module", "gelu-mlp"],
)
def test_modules_with_weights_eps_and_bias(make_model: Callable[[], nn.Module], shapes: tuple[tuple[int, ...]]) -> None:
    model = build(make_model)
    args = inputs(*shapes)
    c = capture(model, args)
    assert rel_err(only_output(c, args), float64_output(model, args)) < 1e-12


def test_rms_norm_without_eps_takes_torchs_default() -> None:
    """F.rms_norm's eps=None is the dtype's machine epsilon, not zero."""
    fn = lambda x: F.rms_norm(x, (x.shape[-1],))  # noqa: E731
    args = (torch.full((4, 8), 1e-3, dtype=torch.float16),)  # mean(x²) = 1e-6, so eps (9.8e-4) dominates
    c = capture(fn, args)
    want = x = args[0].double()
    want = x / torch.sqrt((x * x).mean(-1, keepdim=True) + torch.finfo(torch.float16).eps)
    assert rel_err(only_output(c, args), want) < 1e-12
    assert rel_err(only_output(c, args), x / torch.sqrt((x * x).mean(-1, keepdim=True))) > 0.1
