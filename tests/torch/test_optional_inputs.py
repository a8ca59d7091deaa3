"""An optional tensor argument the example call left at its default None (`forward(self, x, mask=None)`
optimised with x alone) and a call passing one by position, `m(x, mask)`: the mask changes what the model
computes, so the module refuses the call, naming `mask` and how to optimise for it; `m(x, None)` is the
call it was optimised for. A module made from the store (`mugraph.load`) knows the forward's parameters
too: its exported program's file keeps their names and defaults."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.torch.errors import InputMismatchError
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
        h = F.gelu(self.fc(x)) * scale
        return h if mask is None else h * mask


@pytest.fixture(scope="module")
def modules(workdir: Any) -> Iterator[tuple[Masked, torch.Tensor, OptimizedModule, OptimizedModule]]:
    torch.manual_seed(0)
    model, x = Masked().eval(), torch.randn(16, 32)
    fast = mugraph.optimize(model, x, **OPTIONS)
    assert fast.verdict.self_check is None and fast.verdict.fragments[0].kernels
    yield model, x, fast, mugraph.load(fast.verdict.store)


@pytest.mark.parametrize("made", ["optimize", "load"])
def test_an_optional_tensor_passed_by_position_is_refused_naming_it(
    modules: tuple[Masked, torch.Tensor, OptimizedModule, OptimizedModule], made: str
) -> None:
    model, x, fast, loaded = modules
    module = fast if made == "optimize" else loaded
    mask = (torch.rand(16, 64, generator=torch.Generator().manual_seed(1)) > 0.5).float()
    for args, kwargs in (((x, mask), {}), ((x,), {"mask": mask})):
        with pytest.raises(InputMismatchError) as e:
            module(*args, **kwargs)
        text = str(e.value)
        assert len(text.splitlines()) == 1 and "argument 'mask' is a [16, 64] torch.float32 tensor" in text
        assert "optimised for a call with mask=None" in text and "example_inputs=(x, mask)" in text
    want = model(x)
    for ok in (module(x), module(x, None), module(x, mask=None), module(x, None, 1.0)):
        assert torch.allclose(ok, want, atol=1e-5)
    with pytest.raises(InputMismatchError, match=r"scale=2\.0, where the module was captured with scale=1\.0"):
        module(x, None, 2.0)
