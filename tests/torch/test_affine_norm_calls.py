"""A norm the program keeps with its weight and bias (the lowering writes norm, mul, add) runs as
PyTorch's one norm call, as the model runs it and the cost model prices it: the model's result (one
rounding), and no separate mul or add."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import DType, OpKind
from mugraph.torch.capture import capture
from mugraph.torch.kernels import TORCH_DTYPES, Launcher
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_calls import TorchCalls, run_every_op
from tests.helpers.torch_models import rel_err

N, D = 16, 256


def _norm_graph(kind: OpKind, dtype: DType, bias: bool) -> KernelGraph:
    """x -> norm -> * w (-> + b) -> output, as the torch lowering writes nn.LayerNorm and nn.RMSNorm."""
    g = KernelGraph()
    x = g.new_input((N, D), dtype, name="x")
    w = g.new_input((1, D), dtype, name="w")
    y = g.mul(g.layer_norm(x, eps=1e-5) if kind is OpKind.LAYER_NORM else g.rms_norm(x, eps=1e-5), w)
    if bias:
        y = g.add(g.new_input((1, D), dtype, name="b"), y)  # the bias first: the add is the same
    g.mark_output(y, "out")
    return g


@pytest.mark.parametrize("dtype", [DType.FLOAT16, DType.FLOAT32])
@pytest.mark.parametrize(
    ("kind", "bias", "want"),
    [
        (OpKind.LAYER_NORM, True, lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5)),
        (OpKind.RMS_NORM, False, lambda x, w, b: F.rms_norm(x, x.shape[-1:], w, 1e-5)),
    ],
)
def test_the_launcher_runs_the_chain_as_pytorch_s_one_norm_call(
    dtype: DType, kind: OpKind, bias: bool, want: Callable[..., torch.Tensor]
) -> None:
    g = _norm_graph(kind, dtype, bias)
    launcher = Launcher(g, {})
    torch.manual_seed(0)
    td = TORCH_DTYPES[dtype]
    x, w, b = (3 * torch.randn(N, D)).to(td), (1 + 0.1 * torch.randn(D)).to(td), (0.1 * torch.randn(D)).to(td)
    values = {"x": x, "w": w.reshape(1, D), "b": b.reshape(1, D)}
    tensors = {op.outputs[0]: values[str(op.attr("name"))] for op in g.ops if op.kind is OpKind.INPUT}
    with TorchCalls() as calls:
        (made,) = run_every_op(launcher, tensors)
    assert made == next(op.inputs[0] for op in g.ops if op.kind is OpKind.OUTPUT)
    out = tensors[made]
    assert out.dtype == td and out.shape == (N, D)
    # float32 arithmetic rounded once: the model's own call in float32, rounded to the dtype
    expected = want(x.float(), w.float(), b.float()).to(td)
    assert torch.equal(out, expected)
    assert [n for n in calls.names if n in ("layer_norm", "rms_norm", "mul", "add")] == [kind.value]
    assert launcher.torch_calls == 1


def test_a_norm_read_elsewhere_runs_its_ops_apart() -> None:
    """PyTorch's call hands back only the scaled result: the plain norm read too is not one call."""
    g = KernelGraph()
    x, w = g.new_input((N, D), name="x"), g.new_input((1, D), name="w")
    y = g.layer_norm(x)
    g.mark_output(y, "plain")
    g.mark_output(g.mul(y, w), "scaled")
    launcher = Launcher(g, {})
    tensors = {0: torch.randn(N, D).half(), 1: torch.randn(1, D).half()}
    assert len(run_every_op(launcher, tensors)) == 2 and launcher.torch_calls == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("norm", [lambda: nn.LayerNorm(D), lambda: nn.RMSNorm(D, eps=1e-6)])
def test_a_module_keeping_the_reference_gives_the_model_s_result_in_one_norm_call(
    dtype: torch.dtype, norm: Callable[[], nn.Module]
) -> None:
    torch.manual_seed(0)
    model = norm().to(dtype).eval()
    with torch.no_grad():  # a weight and bias other than ones and zeros
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = (3 * torch.randn(N, D)).to(dtype)
    c = capture(model, (x,))
    module = OptimizedModule(c, c.lowering.graph)  # the reference kept: norm, mul (and add) in the program
    kinds = [op.kind for op in c.lowering.graph.ops]
    assert OpKind.MUL in kinds
    with torch.no_grad(), TorchCalls() as calls:
        got = module(x)
    with torch.no_grad():
        want = model(x)
    norms = [n for n in calls.names if n in ("layer_norm", "rms_norm")]
    assert len(norms) == 1 and "mul" not in calls.names and "add" not in calls.names, calls.names
    assert rel_err(got, want) <= (1e-3 if dtype is torch.float16 else 1e-6)
    assert "torch_calls=1," in repr(module)  # what the module says it runs
