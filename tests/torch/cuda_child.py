"""The checks of test_cuda.py, each run in a process of its own on a CUDA machine (no TRITON_INTERPRET:
the kernels compiled by Triton for the GPU). `python -m tests.torch.cuda_child CHECK [STORE]`; exits
non-zero with the failed assertion."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import mugraph
import mugraph.torch.kernels as kernels
from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import DType, OpKind
from mugraph.torch.errors import TorchError
from tests.helpers.torch_kernels import silu_of_product
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, GeluLinear, build, float64_output, inputs, rel_err

TOLERANCE = {torch.float16: FP16_TOLERANCE, torch.bfloat16: 4e-2, torch.float32: 1e-5}


def fused_product() -> None:
    """silu(X @ W) in one compiled kernel, in each dtype, on CUDA tensors: torch's product."""
    assert not kernels.interpreting()
    for dtype in (DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32):
        graph = silu_of_product(dtype)
        launcher = kernels.Launcher(graph, {})
        assert launcher.module is not None
        kernel = launcher.module.kernel_0
        assert type(kernel).__name__ == "JITFunction", type(kernel)  # compiled, not interpreted
        torch.manual_seed(0)
        td = kernels.TORCH_DTYPES[dtype]
        x, w = torch.randn(16, 64).to(td).cuda(), (torch.randn(64, 128) / 8).to(td).cuda()
        tensors = {0: x, 1: w}
        (index,) = [i for i, op in enumerate(graph.ops) if op.block is not None]
        (made,) = launcher.run(index, tensors, None)
        out = tensors[made]
        assert out.is_cuda and out.dtype == td
        want = torch.nn.functional.silu(x.double() @ w.double())
        err = rel_err(out, want)
        assert err <= {DType.FLOAT16: 2e-3, DType.BFLOAT16: 1e-2, DType.FLOAT32: 1e-5}[dtype], (dtype, err)


def predefined() -> None:
    """Pre-defined ops on CUDA tensors in their own dtype (torch's kernels compute in float32): the
    float32 path's results on the CPU, within a rounding of the dtype."""
    from mugraph.ir.graph import KernelGraph

    for dtype in (DType.FLOAT16, DType.BFLOAT16):
        g = KernelGraph()
        x, w = g.new_input((16, 256), dtype), g.new_input((256, 512), dtype)
        made = {"matmul": g.matmul(x, w)}
        made["add"] = g.add(made["matmul"], made["matmul"])
        made["silu"] = g.silu(made["matmul"])
        made["rms_norm"] = g.rms_norm(made["matmul"], 1e-6)
        td = kernels.TORCH_DTYPES[dtype]
        torch.manual_seed(0)
        values = {0: torch.randn(16, 256).to(td), 1: (torch.randn(256, 512) / 16).to(td)}
        gpu = {k: v.cuda() for k, v in values.items()}
        for op in g.ops:
            if op.kind in (OpKind.INPUT, OpKind.OUTPUT):
                continue
            for env, dev in ((values, "cpu"), (gpu, "cuda")):
                out = kernels.torch_op(op, [env[i] for i in op.inputs], td)
                assert out.dtype == td and out.device.type == dev
                env[op.outputs[0]] = out
        for name, t in made.items():
            err = rel_err(gpu[t.index].cpu(), values[t.index])
            assert err <= (4e-3 if dtype is DType.FLOAT16 else 3e-2), (dtype, name, err)


def optimize(dtype: torch.dtype, store: Path) -> None:
    """A linear layer with erf-GELU on the GPU through `mugraph.optimize` (a real run: Dask workers, the
    private Redis memo, a Zarr store): one compiled kernel, the model's outputs, a self-check that
    agreed; the store's module moved to the GPU gives the same; CPU inputs refused in words."""
    model = build(GeluLinear, dtype=dtype).cuda()
    x = tuple(t.cuda() for t in inputs((16, 32), dtype=dtype))
    module = mugraph.optimize(
        model, x, store=store, workers=1, settings=GELU_LINEAR_SETTINGS, dashboard_address=None, verbose=False
    )
    assert module.verdict.self_check is None, module.verdict
    measured = module.verdict.measured  # timed beside the model, the kernels compiled
    assert measured is not None and measured.calls >= 3 and measured.device.startswith("NVIDIA"), measured
    assert measured.line() in "\n".join(module.verdict.lines())
    assert [op.kind for op in module.program.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)] == [OpKind.CUSTOMIZED]
    out = module(*x)
    assert out.is_cuda and out.dtype == dtype and out.shape == (16, 64)
    assert rel_err(out, float64_output(model, x)) <= TOLERANCE[dtype]
    loaded = mugraph.load(store).cuda()
    assert torch.equal(loaded(*x), out)
    try:
        loaded(*(t.cpu() for t in x))
    except TorchError as e:
        assert "move the model and its inputs to the GPU" in str(e), e
    else:
        raise AssertionError("a CUDA module ran CPU inputs")


def refuse(store: Path) -> None:
    """A model left on the CPU of a CUDA machine: refused before any search, nothing stored."""
    try:
        mugraph.optimize(build(GeluLinear), inputs((16, 32)), store=store, workers=1, verbose=False)
    except TorchError as e:
        assert "tensors are on cpu" in str(e), e
    else:
        raise AssertionError("a CPU model was optimised on a CUDA machine")
    assert not store.exists()


if __name__ == "__main__":
    check, *rest = sys.argv[1:]
    if check == "fused_product":
        fused_product()
    elif check == "predefined":
        predefined()
    elif check == "optimize":
        optimize(getattr(torch, rest[0]), Path(rest[1]))
    elif check == "refuse":
        refuse(Path(rest[0]))
    else:
        raise SystemExit(f"unknown check {check}")
    print("OK")
