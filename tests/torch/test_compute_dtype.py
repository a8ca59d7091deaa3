"""The dtype a module is optimised for is its kernels' (the model's compute dtype), not a buffer's: an fp16
model keeping a float32 table (rotary frequencies, as many language models do) is optimised for fp16,
`.half()` of it changes nothing the kernels read and keeps them on, and a conversion to another compute
dtype names fp16 as the dtype it was optimised for, with what to do."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.torch import runtime
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class Rotary(nn.Module):
    """An fp16 GELU layer (searched) scaled by the cosine of a float32 frequency table (glue)."""

    freq: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)
        self.register_buffer("freq", torch.linspace(0.0, 3.0, 64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc(x))
        return h * torch.cos(self.freq).to(h.dtype)


@pytest.fixture(scope="module")
def fast(workdir: Any) -> Iterator[tuple[Rotary, OptimizedModule, torch.Tensor]]:
    torch.manual_seed(0)
    model = Rotary().half().eval()
    model.freq = model.freq.float()  # kept in float32, as the model's own code keeps it
    x = torch.randn(16, 32, dtype=torch.float16)
    module = mugraph.optimize(model, x, **OPTIONS)
    assert module.verdict.self_check is None and module.kernels_off is None
    assert module.verdict.fragments[0].kernels
    yield model, module, x


def _launches(module: OptimizedModule, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    ran: list[int] = []
    real = module._launcher.run

    def counted(index: int, *rest: Any) -> Any:
        ran.append(index)
        return real(index, *rest)

    monkeypatch.setattr(module._launcher, "run", counted)
    return ran


def test_half_of_an_fp16_model_holding_float32_buffers_keeps_the_kernels(
    fast: tuple[Rotary, OptimizedModule, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, module, x = fast
    ran = _launches(module, monkeypatch)
    try:
        module.half()
        assert module.kernels_off is None and module.get_buffer("freq").dtype == torch.float16
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "kernels are off" warning
            got = module(x)
        assert ran and torch.allclose(got.float(), model(x).float(), atol=2e-2)  # the model converted too
        module.to(torch.float16)
        assert module.kernels_off is None
    finally:
        module.get_buffer("freq").data = torch.linspace(0.0, 3.0, 64)
        model.freq = module.get_buffer("freq")


def test_a_real_conversion_names_the_compute_dtype_it_was_optimised_for(
    fast: tuple[Rotary, OptimizedModule, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, module, x = fast
    monkeypatch.setattr(runtime, "_WARNED", set())
    try:
        module.float()
        why = module.kernels_off
        assert why is not None and "are torch.float32 where it was optimised for torch.float16;" in why
        assert "convert it back (.to(torch.float16))" in why and "optimise the model again in torch.float32" in why
        with pytest.warns(UserWarning, match=r"optimised for torch\.float16"):
            module(x.float())
    finally:
        module.half()
    assert module.kernels_off is None  # converted back: on again, though the table is fp16 now
    ran = _launches(module, monkeypatch)
    assert torch.allclose(module(x).float(), model(x).float(), atol=2e-2) and ran
