"""The drop-in module's graph-defined ops as Triton kernels on the CPU (Triton's interpreter): a
block graph with a matmul gives torch's product in every dtype the PyTorch route takes, bfloat16
included (whose tl.dot the interpreter gets wrong unless its tiles enter it as float32)."""

from __future__ import annotations

import pytest
import torch

from mugraph.ir.types import DType
from mugraph.torch.kernels import TORCH_DTYPES, Launcher, kernels_source
from tests.helpers.torch_kernels import silu_of_product


@pytest.mark.parametrize("dtype", [DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32])
def test_a_fused_product_computes_torchs_product(dtype: DType) -> None:
    graph = silu_of_product(dtype)
    launcher = Launcher(graph, {})
    torch.manual_seed(0)
    x = torch.randn(16, 64).to(TORCH_DTYPES[dtype])
    w = (torch.randn(64, 128) / 8).to(TORCH_DTYPES[dtype])
    tensors = {0: x, 1: w}
    (index,) = [i for i, op in enumerate(graph.ops) if op.block is not None]
    (made,) = launcher.run(index, tensors, None)
    expected = torch.nn.functional.silu(x.double() @ w.double())
    out = tensors[made]
    assert out.dtype == TORCH_DTYPES[dtype]
    err = ((out.double() - expected).abs().max() / expected.abs().max()).item()
    assert err <= {DType.FLOAT16: 2e-3, DType.BFLOAT16: 1e-2, DType.FLOAT32: 1e-5}[dtype], err


def test_bfloat16_tiles_enter_tl_dot_as_float32_only_in_the_interpreter() -> None:
    graph = silu_of_product(DType.BFLOAT16)
    compiled, _ = kernels_source(graph)
    interpreted, _ = kernels_source(graph, interpreted=True)
    assert "tl.dot(" in compiled and ".to(tl.float32), " not in compiled.split("tl.dot(")[1].split("\n")[0]
    dot_line = next(ln for ln in interpreted.splitlines() if "tl.dot(" in ln)
    assert dot_line.count(".to(tl.float32)") == 2 and "input_precision='ieee'" in dot_line


def test_a_weight_converted_after_optimising_is_named_not_left_to_tritons_words() -> None:
    """The module shares the model's parameters: after model.double() a kernel gets a float64 weight."""
    from mugraph.torch.errors import TorchError

    graph = silu_of_product(DType.FLOAT16)
    launcher = Launcher(graph, {})
    tensors = {0: torch.zeros(16, 64, dtype=torch.float16), 1: torch.zeros(64, 128, dtype=torch.float64)}
    (index,) = [i for i, op in enumerate(graph.ops) if op.block is not None]
    with pytest.raises(TorchError, match=r"torch.float64 tensor where the program computes in torch.float16"):
        launcher.run(index, tensors, None)


def test_bfloat16_results_are_rounded_to_nearest_in_the_interpreter() -> None:
    """Triton's interpreter truncates float32 to bfloat16 (half the values one ulp low, where a GPU
    rounds): the kernels round on the bits there, so a fused product's bfloat16 output is torch's
    float32 result rounded once, as torch and a GPU give it."""
    graph = silu_of_product(DType.BFLOAT16)
    launcher = Launcher(graph, {})
    torch.manual_seed(0)
    x = torch.randn(16, 64).to(torch.bfloat16)
    w = (torch.randn(64, 128) / 8).to(torch.bfloat16)
    tensors = {0: x, 1: w}
    (index,) = [i for i, op in enumerate(graph.ops) if op.block is not None]
    (out,) = launcher.run(index, tensors, None)
    exact = torch.nn.functional.silu(x.double() @ w.double())  # float32's sum is within its ulps of this
    rounded = exact.to(torch.bfloat16)
    same = float((tensors[out] == rounded).float().mean())
    assert same >= 0.97, same  # truncation matched 0.5 of them


def test_the_interpreter_keeps_numpys_overflow_warnings_to_itself() -> None:
    """tanh-GELU of large values overflows an exp on the way to tanh's ±1 (a right result): NumPy,
    under Triton's interpreter, warned of it at every call of a loaded module."""
    import warnings

    from mugraph.ir.graph import BlockGraph, KernelGraph

    g = KernelGraph()
    b = BlockGraph(grid=(1, 1, 1), forloop=1)
    x = b.new_input(g.new_input((16, 64), name="X"), (-1, -1, -1))
    b.new_output(b.accum_no_red(b.gelu(x)), (-1, -1, -1))
    g.mark_output(g.customized(b)[0], "O")
    (index,) = [i for i, op in enumerate(g.ops) if op.block is not None]
    tensors = {0: (torch.randn(16, 64, generator=torch.Generator().manual_seed(0)) * 1000).half()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = Launcher(g, {}).run(index, tensors, None)
    want = torch.nn.functional.gelu(tensors[0].float(), approximate="tanh")
    assert torch.allclose(tensors[out].float(), want, rtol=1e-3, atol=1e-3)
