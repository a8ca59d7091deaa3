"""The captured program means what PyTorch computes: each lowered op (erf and tanh GELU, rms_norm and
layer_norm with eps, weight and bias, as torch's ops or written out with their casts, linear with bias
on 2-d and 3-d inputs, scalar operands, fp16, bf16 and fp32) is evaluated by mugraph's float64
interpreter and compared with torch's own float64 output of the same model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import OpKind
from mugraph.torch.capture import Captured, capture
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_float64 import only_output
from tests.helpers.torch_models import GeluMLP, RMSNorm, build, float64_output, inputs, rel_err, rms_norm


def rms_written(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RMSNorm as users write it: weight before, 1/sqrt."""
    return w * (x * (1 / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)))


def layer_written(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """LayerNorm written out: centred, variance of the centred values, rsqrt, affine."""
    d = x - x.mean(-1, keepdim=True)
    return d * torch.rsqrt(d.pow(2).mean(-1, keepdim=True) + 1e-5) * w + b


class Gelu(nn.Module):
    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ x.t(), approximate=self.approximate)


FUNCTIONS: dict[str, tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]] = {
    "scalars": (lambda x, y: (2.0 - x / 4.0 + 0.5 * y - (-x)) * 3.0, ((8, 16), (8, 16))),
    "mean_sum": (lambda x: x.mean(-1, keepdim=True) + x.sum(0, keepdim=True), ((8, 16),)),
    "cat_relu": (lambda x, y, w: torch.relu(torch.cat([x, y], dim=1)) @ w, ((8, 16), (8, 16), (32, 8))),
    "rms_norm": (rms_norm, ((8, 64), (64,))),
    "rms_norm_3d": (rms_norm, ((2, 4, 64), (64,))),
    "rms_written": (rms_written, ((2, 4, 64), (64,))),
    "rms_sum_div": (lambda x: x / torch.sqrt((x * x).sum(-1, keepdim=True) / 64 + 1e-5), ((8, 64),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b, 1e-5), ((2, 4, 64), (64,), (64,))),
    "layer_written": (layer_written, ((8, 64), (64,), (64,))),
    "linear_3d": (lambda x, w, b: F.linear(x, w, b) * 2.0 + x.sum(-1, keepdim=True), ((2, 4, 16), (16, 16), (16,))),
    "matmul_3d": (lambda x, w: F.silu(x @ w), ((2, 4, 16), (16, 32))),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
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


class LlamaStyleRMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm, written here: float32 inside, the weight after the cast back."""

    def __init__(self, dim: int = 64, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out: torch.Tensor = self.weight * h.to(dtype)
        return out


class PreNormMLP(nn.Module):
    """RMSNorm with weight, Linear, SiLU or GELU, Linear, residual."""

    def __init__(self, act: str = "silu", dim: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(dim))
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.act = F.silu if act == "silu" else F.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.down(self.act(self.up(self.norm(x))))
        return out


def kinds(c: Captured) -> list[OpKind]:
    return [op.kind for op in c.lowering.graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_the_llama_rmsnorm_casts_are_part_of_the_norm(dtype: torch.dtype) -> None:
    """x to float32, normalised, back to the input dtype, times the weight: one rms_norm op and a mul,
    nothing left to torch; in float64 it agrees with torch up to the float32 rounding the casts make."""
    model = build(LlamaStyleRMSNorm, dtype=dtype)
    args = inputs((2, 8, 64), dtype=dtype)
    c = capture(model, args)
    assert kinds(c) == [OpKind.RMS_NORM, OpKind.MUL] and c.lowering.glue == ()
    (norm,) = c.lowering.graph.ops_of(OpKind.RMS_NORM)
    assert norm.float_attr("eps") == 1e-6
    assert rel_err(only_output(c, args), float64_output(model, args)) < 1e-6


@pytest.mark.parametrize("act", ["silu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_pre_norm_mlp_on_3d_inputs_is_the_program_of_its_2d_form(act: str, dtype: torch.dtype) -> None:
    """[B, S, D] and [B·S, D] give one program (same digest): no linear left to torch, the norm one op;
    each means what torch computes in float64."""
    model = build(lambda: PreNormMLP(act), dtype=dtype)
    (x3,) = inputs((2, 8, 64), dtype=dtype)
    captured = {}
    for x in (x3, x3.reshape(16, 64)):
        c = captured[x.dim()] = capture(model, (x,), name="mlp")
        assert c.lowering.glue == ()
        assert kinds(c)[:2] == [OpKind.RMS_NORM, OpKind.MUL] and kinds(c).count(OpKind.MATMUL) == 2
        assert {t.dtype.value for t in c.lowering.graph.tensors} == {str(dtype).removeprefix("torch.")}
        assert rel_err(only_output(c, (x,)), float64_output(model, (x,))) < 1e-12
    assert captured[3].digest == captured[2].digest


def test_softmax_stays_glue_and_is_finite_in_fp16() -> None:
    """Logits up to about 12 overflow exp in fp16 without torch's max shift: softmax is left to torch,
    so the module's output is torch's own (finite), and the matmul before it is lowered."""
    fn = lambda x, y: torch.softmax(x @ y, dim=-1)  # noqa: E731
    torch.manual_seed(0)
    args = (torch.randn(8, 16).half(), torch.randn(16, 64).half())
    c = capture(fn, args)
    assert [c.exported.graph.find_nodes(op="call_function", target=torch.ops.aten.softmax.int)[0].name] == list(
        c.lowering.glue
    ) and kinds(c) == [OpKind.MATMUL]
    out = OptimizedModule(c, c.lowering.graph)(*args)
    assert (args[0].float() @ args[1].float()).max() > 11.09  # exp of it overflows fp16
    assert torch.isfinite(out).all() and rel_err(out, float64_output(fn, args)) <= FP16_TOLERANCE
