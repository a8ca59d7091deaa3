"""A matmul the program keeps with its bias vector (the lowering writes nn.Linear as matmul, add) runs as
PyTorch's one `addmm`, as the model runs it and the cost model prices it: the model's result (the bias
added before the one rounding), and no separate matmul or add. A product read elsewhere runs apart."""

from __future__ import annotations

from typing import Any

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

M, K, N = 16, 64, 32
PRODUCTS = ("addmm", "linear", "matmul", "mm", "add")  # the calls a product with a bias may be run as


class _Calls(TorchCalls):
    """The torch calls a module makes, and those of them that compute a product."""

    @property
    def products(self) -> list[str]:
        return [n for n in self.names if n in PRODUCTS]


def _inputs(g: KernelGraph, values: dict[str, torch.Tensor]) -> dict[int, torch.Tensor]:
    return {op.outputs[0]: values[str(op.attr("name"))] for op in g.ops if op.kind is OpKind.INPUT}


@pytest.mark.parametrize("dtype", [DType.FLOAT16, DType.FLOAT32])
def test_the_launcher_runs_the_pair_as_one_addmm(dtype: DType) -> None:
    g = KernelGraph()
    x, w, b = (
        g.new_input((M, K), dtype, name="x"),
        g.new_input((K, N), dtype, name="w"),
        g.new_input((1, N), dtype, name="b"),
    )
    g.mark_output(g.add(b, g.matmul(x, w)), "out")  # the bias first: the add is the same
    launcher = Launcher(g, {})
    torch.manual_seed(0)
    td = TORCH_DTYPES[dtype]
    xv, weight, bias = torch.randn(M, K).to(td), (0.2 * torch.randn(N, K)).to(td), torch.randn(N).to(td)
    tensors = _inputs(g, {"x": xv, "w": weight.T, "b": bias.reshape(1, N)})  # W.T read in place, as the module does
    with _Calls() as calls:
        (made,) = run_every_op(launcher, tensors)
    assert calls.products == ["addmm"] and launcher.torch_calls == 1
    out = tensors[made]
    assert out.dtype == td and out.shape == (M, N)
    # float32 arithmetic rounded once: the model's own call in float32, rounded to the dtype
    assert torch.equal(out, F.linear(xv.float(), weight.float(), bias.float()).to(td))


def test_a_product_read_elsewhere_runs_its_bias_add_apart() -> None:
    """PyTorch's call hands back only the biased result: the product read too is computed apart."""
    g = KernelGraph()
    x, w, b = g.new_input((M, K), name="x"), g.new_input((K, N), name="w"), g.new_input((1, N), name="b")
    y = g.matmul(x, w)
    g.mark_output(y, "product")
    g.mark_output(g.add(y, b), "biased")
    launcher = Launcher(g, {})
    values = {"x": torch.randn(M, K).half(), "w": torch.randn(K, N).half(), "b": torch.randn(1, N).half()}
    tensors = _inputs(g, values)
    with _Calls() as calls:
        made = run_every_op(launcher, tensors)
    assert len(made) == 2 and launcher.torch_calls == 2 and calls.products == ["matmul", "add"]
    product = (values["x"].float() @ values["w"].float()).half()
    assert torch.equal(tensors[made[0]], product)
    assert torch.equal(tensors[made[1]], (product.float() + values["b"].float()).half())


def test_an_add_a_norm_took_in_runs_in_the_norm_s_call() -> None:
    """A one-row norm's bias that is a one-row product: the norm's call takes the add in, the product
    runs alone before it (one call each), and the sum is right."""
    g = KernelGraph()
    x, w, v = g.new_input((1, K), name="x"), g.new_input((K, N), name="w"), g.new_input((1, N), name="v")
    g.mark_output(g.add(g.layer_norm(v, eps=1e-5), g.matmul(x, w)), "out")
    launcher = Launcher(g, {})
    values = {"x": torch.randn(1, K), "w": torch.randn(K, N), "v": torch.randn(1, N)}
    tensors = _inputs(g, {k: t.half() for k, t in values.items()})
    with _Calls() as calls:
        (*_, made) = run_every_op(launcher, tensors)
    assert launcher.torch_calls == 2 and "layer_norm" in calls.names and calls.products == ["matmul"]
    product = (values["x"].half().float() @ values["w"].half().float()).half()
    want = F.layer_norm(values["v"].half().float(), (N,), None, product.float().reshape(-1), 1e-5).half()
    assert torch.equal(tensors[made], want)


class _Mlp(nn.Module):
    """Linear, GELU, Linear, both with biases."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(K, 2 * K), nn.Linear(2 * K, N)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x)))
        return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize(("make", "rows", "calls"), [(lambda: nn.Linear(K, N), (M,), 1), (_Mlp, (2, 8), 3)])
def test_a_module_keeping_the_reference_runs_each_linear_as_one_addmm(
    dtype: torch.dtype, make: Any, rows: tuple[int, ...], calls: int
) -> None:
    torch.manual_seed(0)
    model = make().to(dtype).eval()
    x = torch.randn(*rows, K).to(dtype)
    c = capture(model, (x,))
    module = OptimizedModule(c, c.lowering.graph)  # the reference kept: matmul, add in the program
    assert [op.kind for op in c.lowering.graph.ops].count(OpKind.ADD) == calls // 2 + 1
    with torch.no_grad(), _Calls() as seen:
        got = module(x)
    with torch.no_grad():
        want = model(x)
    assert seen.products == ["addmm"] * (calls // 2 + 1), seen.names
    assert got.shape == want.shape and rel_err(got, want) <= (1e-3 if dtype is torch.float16 else 1e-6)
    if dtype is torch.float32 and calls == 1:  # the model's own call: the same numbers
        assert torch.equal(got, want)
    assert f"torch_calls={calls}," in repr(module)  # what the module says it runs


def test_a_module_whose_product_is_read_twice_keeps_the_add_apart() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.randn(K, N)), nn.Parameter(torch.randn(N))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = x @ self.w
            return h + self.b, h * 2

    torch.manual_seed(0)
    model = Shared().eval()
    x = torch.randn(M, K)
    c = capture(model, (x,))
    module = OptimizedModule(c, c.lowering.graph)
    with torch.no_grad(), _Calls() as seen:
        got = module(x)
    with torch.no_grad():
        want = model(x)
    assert "addmm" not in seen.products and {"matmul", "add"} <= set(seen.products), seen.names
    assert all(rel_err(a, b) <= 1e-6 for a, b in zip(got, want, strict=True))
