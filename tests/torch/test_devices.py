"""Tensors the compiled kernels cannot read: on a machine with a CUDA device Triton compiles for the GPU,
so a model or inputs left on the CPU are refused in words, before a search (nothing stored) and at
a call of a loaded module, not by Triton's pointer error deep inside a launch. The interpreter
(TRITON_INTERPRET=1, or no CUDA device) takes tensors anywhere. The GPU itself is in test_cuda.py;
here the compiled mode is what `interpreting` answers, patched."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import mugraph
import mugraph.torch.kernels as kernels
from mugraph.torch.errors import TorchError
from mugraph.torch.kernels import Launcher, check_device, check_model_device
from tests.helpers.torch_kernels import silu_of_product
from tests.helpers.torch_models import GeluLinear, build, inputs


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a CUDA machine's: the kernels compiled, for CUDA tensors only."""
    monkeypatch.setattr(kernels, "interpreting", lambda: False)


def test_the_interpreter_takes_cpu_tensors() -> None:
    assert kernels.interpreting()  # tests/torch/conftest.py chose it
    check_device([torch.zeros(2)])
    check_model_device(build(GeluLinear), inputs((16, 32)))


@pytest.mark.usefixtures("compiled")
def test_cpu_tensors_are_refused_in_words_where_kernels_are_compiled() -> None:
    with pytest.raises(TorchError, match=r"tensors are on cpu: move the model and its inputs to the GPU"):
        check_device([torch.zeros(2)])
    with pytest.raises(TorchError, match="TRITON_INTERPRET=1"):
        check_model_device(build(GeluLinear), ())  # the parameters alone


@pytest.mark.usefixtures("compiled")
def test_optimize_refuses_a_cpu_model_before_any_search(tmp_path: Path) -> None:
    store = tmp_path / "never.zarr"
    with pytest.raises(TorchError, match="tensors are on cpu"):
        mugraph.optimize(build(GeluLinear), inputs((16, 32)), store=store, workers=1, verbose=False)
    assert not store.exists()


def test_a_launch_on_cpu_tensors_is_refused_before_triton_sees_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from mugraph.ir.types import DType

    graph = silu_of_product(DType.FLOAT16)
    launcher = Launcher(graph, {})  # built in the interpreter, so that its kernels load on this machine
    monkeypatch.setattr(kernels, "interpreting", lambda: False)
    (index,) = [i for i, op in enumerate(graph.ops) if op.block is not None]
    tensors = {0: torch.zeros(16, 64, dtype=torch.float16), 1: torch.zeros(64, 128, dtype=torch.float16)}
    with pytest.raises(TorchError, match="tensors are on cpu"):
        launcher.run(index, tensors, None)
