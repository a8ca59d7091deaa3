"""The check `mugraph.optimize` makes of the module it hands over: the module's outputs against the
model's on the example inputs, rounding let through, a wrong kernel's values not; a verdict that
records a disagreement says so and claims no speedup."""

from __future__ import annotations

import dataclasses

import torch

from mugraph.torch.self_check import model_outputs, output_mismatch
from mugraph.torch.verdict import FragmentVerdict, Verdict


def model(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.nn.functional.silu(x @ x.t()), x * 2


X = (torch.randn(16, 32, generator=torch.Generator().manual_seed(0)).to(torch.float16),)


def test_outputs_rounded_otherwise_pass() -> None:
    def fused(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # in float32, rounded once
        return torch.nn.functional.silu(x.float() @ x.float().t()).half(), x * 2

    assert output_mismatch(fused, model_outputs(model, X), X) is None


def test_wrong_values_nan_and_a_missing_output_are_caught() -> None:
    def garbage(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((16, 16), 5e4, dtype=torch.float16), x * 2

    def nan(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, z = model(x)
        return y, z.masked_fill(z > 1, float("nan"))

    said = output_mismatch(garbage, model_outputs(model, X), X)
    assert said is not None and said.startswith("output 0 differs from the model's by") and "bound 0.04" in said
    assert output_mismatch(nan, model_outputs(model, X), X) == "output 1 holds inf or nan where the model's is finite"
    assert (
        output_mismatch(lambda x: model(x)[0], model_outputs(model, X), X) == "1 output tensor where the model gives 2"
    )


def test_a_verdict_with_a_disagreement_says_so_and_claims_nothing() -> None:
    f0 = FragmentVerdict("f0", "a" * 64, 2.0, 1, 1e-5, 3)
    verdict = Verdict("m", True, False, (f0,), (), "runs/m.zarr", None, "H100")
    assert verdict.faster and verdict.notes() == []
    checked = dataclasses.replace(verdict, self_check="output 0 differs from the model's by 1e+06")
    assert not checked.faster
    assert "differed from the model's on the example inputs (output 0 differs" in checked.notes()[0]
    assert "runs the model's own program instead" in checked.notes()[0]
    assert checked.lines()[0].endswith("(found, not run: the module runs the model's own program)")
    assert not verdict.lines()[0].endswith("not run: the module runs the model's own program)")


class Counter(torch.nn.Module):
    """Counts its calls in a buffer: running it to check the module would count one call more."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        calls = self.get_buffer("calls")
        calls.add_(1)
        return x * 2


def test_a_model_that_writes_its_buffers_is_not_run_by_the_check() -> None:
    from mugraph.torch.capture import export
    from mugraph.torch.self_check import writes_state

    assert writes_state(export(Counter().eval(), X))
    assert not writes_state(export(lambda x: model(x)[0], X))


def test_a_module_that_raises_where_the_model_runs_is_a_mismatch_not_a_crash() -> None:
    def broken(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise RuntimeError("view size is not compatible with input tensor's size and stride\nmore")

    said = output_mismatch(broken, model_outputs(model, X), X)
    assert said == (
        "the module failed with RuntimeError: view size is not compatible with input tensor's size and stride"
    )
