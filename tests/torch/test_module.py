"""The drop-in module around a captured program, without a search: each test model's own lowered
program (every op a torch call computing in float32, glue in torch) gives the model's outputs within
fp16 (or bf16) rounding, holds its state under the model's names, and takes another model's
state_dict."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from mugraph.codegen import FP16_TOLERANCE
from mugraph.torch.capture import capture
from mugraph.torch.runtime import InputMismatchError, OptimizedModule
from tests.helpers.torch_models import DecoderBlock, GeluMLP, build, float64_output, inputs, rel_err, rms_norm

MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[tuple[int, ...], ...]]] = {
    "decoder_block": (DecoderBlock, ((16, 64),)),
    "gelu_mlp": (GeluMLP, ((16, 64),)),
}
BF16_TOLERANCE = 4e-2  # bf16 keeps 8 significant bits: 2**-8 per rounding, a few roundings deep


@pytest.mark.parametrize("name, dtype", [("decoder_block", torch.float16), ("gelu_mlp", torch.bfloat16)])
def test_the_reference_program_as_a_module_computes_what_the_model_does(name: str, dtype: torch.dtype) -> None:
    cls, shapes = MODELS[name]
    model = build(cls, dtype=dtype)
    x = inputs(*shapes, dtype=dtype)
    captured = capture(model, x)
    module = OptimizedModule(captured, captured.lowering.graph)
    tol = FP16_TOLERANCE if dtype is torch.float16 else BF16_TOLERANCE
    out = module(*x)
    assert out.dtype == dtype and rel_err(out, model(*x)) <= tol
    assert rel_err(out, float64_output(model, x)) <= tol
    assert list(module.state_dict()) == list(model.state_dict())
    lowered, glue, program = module.describe().splitlines()  # no verdict: not made by a search
    assert lowered.startswith("lowered (") and glue.startswith("glue run by PyTorch (") and "matmul" in program
    assert "customized" not in program  # the reference: no kernel, so no legend for one
    other = build(cls, seed=5, dtype=dtype)
    module.load_state_dict(other.state_dict())
    assert rel_err(module(*x), other(*x)) <= tol and rel_err(module(*x), out) > 0.05


def test_a_function_with_a_weight_argument() -> None:
    x, w = inputs((8, 64), (64,))
    captured = capture(rms_norm, (x, w))
    module = OptimizedModule(captured, captured.lowering.graph)
    assert list(module.state_dict()) == []
    assert rel_err(module(x, w), float64_output(rms_norm, (x, w))) <= FP16_TOLERANCE


@pytest.mark.parametrize(
    "call, message",
    [
        (
            (torch.zeros(8, 64, dtype=torch.float16),),
            r"input x is \[8, 64\] torch.float16; .* \[16, 64\] torch.float16 \(dim 0 is 8, not 16; shapes are fixed",
        ),
        ((torch.zeros(16, 64, 1, dtype=torch.float16),), r"\(3 dims where it was 2; shapes are fixed"),
        ((torch.zeros(16, 64),), r"torch.float32; this module was optimised for \[16, 64\] torch.float16 \(pass "),
        ((), r"input 'x' missing: the module was optimised for a call that passes it"),
    ],
    ids=["shape", "rank", "dtype", "arity"],
)
def test_other_shapes_or_dtypes_are_refused(call: tuple[Any, ...], message: str) -> None:
    model = build(GeluMLP)
    captured = capture(model, inputs((16, 64)))
    with pytest.raises(InputMismatchError, match=message):
        OptimizedModule(captured, captured.lowering.graph)(*call)


def test_an_input_that_requires_grad_is_warned_once_that_no_gradient_flows() -> None:
    model = build(GeluMLP)
    (x,) = inputs((16, 64))
    captured = capture(model, (x,))
    module = OptimizedModule(captured, captured.lowering.graph)
    x.requires_grad_(True)
    with pytest.warns(UserWarning, match="requires grad, but the optimised module is for inference") as said:
        out = module(x)
    assert not out.requires_grad
    assert said[0].filename == __file__  # the caller's line, not torch's call wrappers
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module(x)  # once per model, not at every call
        with torch.no_grad():
            module(x)


def test_a_call_under_autocast_is_warned_once_that_autocast_does_not_apply() -> None:
    model = build(GeluMLP)
    (x,) = inputs((16, 64))
    captured = capture(model, (x,))
    module = OptimizedModule(captured, captured.lowering.graph)
    with torch.autocast("cpu", torch.bfloat16):
        with pytest.warns(UserWarning, match="torch.autocast does not apply to an optimised module") as said:
            out = module(x)
        assert said[0].filename == __file__
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            module(x)  # once per model
    assert out.dtype == torch.float16  # the dtype it was optimised for


def test_a_keyword_argument_the_forward_does_not_take_is_named() -> None:
    model = build(GeluMLP)
    (x,) = inputs((16, 64))
    captured = capture(model, (x,))
    module = OptimizedModule(captured, captured.lowering.graph)
    with pytest.raises(InputMismatchError, match="keyword argument 'scale' is not a parameter of its forward"):
        module(x, scale=3.0)  # not one the example left out: GeluMLP.forward has no `scale`


class _Cubes(nn.Module):
    """x³ and x⁴ (GELU written out, polynomial features) before a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(0.044715 * torch.pow(x, 3.0) + x.pow(4))
        return out


def test_integer_powers_are_lowered_and_compute_what_the_model_does() -> None:
    model = _Cubes().float().eval()
    x = torch.randn(16, 64)
    captured = capture(model, (x,))
    assert not any(name.startswith("pow") for name in captured.lowering.glue), captured.lowering.describe()
    module = OptimizedModule(captured, captured.lowering.graph)
    with torch.no_grad():
        assert rel_err(module(x), model(x)) < 1e-5


def test_a_module_running_the_models_own_program_says_why_it_cannot_be_pickled() -> None:
    """After a failed check the module runs the model's program and belongs to no run: pickling it says
    so (and to pickle the model), not that it has no store, while its verdict names one."""
    import pickle

    from mugraph.torch.verdict import Verdict

    model = build(GeluMLP)
    captured = capture(model, inputs((16, 64)))
    module = OptimizedModule(captured, captured.lowering.graph, "reference", share=True)
    module.verdict = Verdict("GeluMLP", True, False, (), (), "runs/s.zarr", None, "H100", self_check="output 0 differs")
    with pytest.raises(TypeError, match=r"runs the model's own program .* pickle the model itself"):
        pickle.dumps(module)
