"""A model holding the drop-in module converts it, or switches its mode, whole: torch converts a
module's children one after another, so the module takes every conversion (and training mode) rather
than refusing it half-way, and runs the model's own forward where its kernels cannot serve: a dtype they
were not made for, or training mode. Converting back (or `eval()`) turns the kernels on again."""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.torch import runtime
from mugraph.torch.errors import TorchError, TrainingModeError
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, inputs

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class DropGelu(nn.Module):
    """A linear layer and erf-GELU (searched), dropout (nothing in eval mode, random in training mode)
    and a buffer added (glue)."""

    shift: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.drop(F.gelu(self.fc(x))) + self.shift
        return out


class Parent(nn.Module):
    """A model holding the optimized module after a layer of its own."""

    def __init__(self, fast: nn.Module) -> None:
        super().__init__()
        self.pre = nn.Linear(32, 32)
        self.fast = fast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fast(self.pre(x))
        return out


@dataclass(frozen=True)
class Run:
    model: DropGelu
    x: torch.Tensor
    module: OptimizedModule


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    cwd, before = tmp_path_factory.mktemp("cwd"), Path.cwd()
    os.chdir(cwd)
    try:
        torch.manual_seed(0)
        model, (x,) = DropGelu().eval(), inputs((16, 32), dtype=torch.float32)
        fast = mugraph.optimize(model, x, **OPTIONS)
        assert fast.verdict.self_check is None and fast.kernels_off is None
        yield Run(model, x, fast)
    finally:
        os.chdir(before)


def launches(module: OptimizedModule, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The program ops the module's launcher runs, recorded as they run."""
    ran: list[int] = []
    launcher = module._launcher
    real = launcher.run

    def counted(index: int, *rest: Any) -> Any:
        ran.append(index)
        return real(index, *rest)

    monkeypatch.setattr(launcher, "run", counted)
    return ran


def off(module: OptimizedModule) -> str | None:
    """Why the kernels are off (read through a call: mypy keeps no narrowing of it across conversions)."""
    return module.kernels_off


def every_dtype(module: nn.Module) -> set[torch.dtype]:
    return {t.dtype for t in (*module.parameters(), *module.buffers())}


def test_a_parent_converts_the_module_whole_and_it_runs_the_converted_model(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, model = run.module, run.model
    ran = launches(fast, monkeypatch)
    monkeypatch.setattr(runtime, "_WARNED", set())  # its warning is once per process
    parent = Parent(fast).eval()
    try:
        parent.to(torch.bfloat16)  # torch converts `pre`, then the module: neither refused half-way
        assert every_dtype(parent) == every_dtype(model) == {torch.bfloat16}
        assert fast.get_buffer("shift") is model.shift  # the model converted too, and still shared
        assert fast.kernels_off is not None and "torch.bfloat16 where it was optimised for torch.float32" in (
            fast.kernels_off
        )
        h = parent.pre(run.x.bfloat16())
        with pytest.warns(UserWarning, match="the kernels are off, the model's own forward runs"):
            got = parent(run.x.bfloat16())
        assert got.dtype == torch.bfloat16 and torch.equal(got, model(h))  # the converted model's result
        assert ran == []
        assert "kernels off, the model's own forward runs" in fast.describe()
    finally:
        parent.float()
    assert every_dtype(parent) == every_dtype(model) == {torch.float32} and off(fast) is None
    got = fast(run.x)
    assert ran and torch.allclose(got, model(run.x), atol=1e-4)  # the kernels again, on the model's weights


def test_training_mode_runs_the_model_in_training_mode_until_eval(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, model = run.module, run.model
    ran = launches(fast, monkeypatch)
    parent = Parent(fast).eval()
    try:
        parent.train()
        assert all(m.training for m in parent.modules()) and "training mode" in (fast.kernels_off or "")
        assert not model.training  # the model the user holds keeps its own mode
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fast(run.x)
        dropped = out == model.shift  # dropout: about half the values are the buffer alone
        assert 0.3 < float(dropped.float().mean()) < 0.7 and ran == []
        out.sum().backward()  # the model's forward, with grad: the shared weight gets its gradient
        assert model.fc.weight.grad is not None and model.fc.weight.grad.abs().sum() > 0
    finally:
        parent.eval()
        model.fc.weight.grad = None
    assert fast.kernels_off is None and torch.allclose(fast(run.x), model(run.x), atol=1e-4) and ran


def test_a_module_without_its_model_takes_the_conversion_and_refuses_the_call(run: Run) -> None:
    """A module made from the store (`mugraph.load`, an unpickling) holds no model to run: the
    conversion and the mode are taken whole all the same, and its call says what to do."""
    loaded = mugraph.load(run.module.verdict.store)
    parent = Parent(loaded).eval()
    parent.half()
    assert every_dtype(parent) == {torch.float16}
    with pytest.raises(TorchError, match=r"torch\.float16 where it was optimised for torch\.float32; .*holds no model"):
        loaded(run.x.half())
    parent.float().train()
    with pytest.raises(TrainingModeError, match=r"in training mode.*holds no model to run instead"):
        loaded(run.x)
    parent.eval()
    assert torch.allclose(loaded(run.x), run.model(run.x), atol=1e-2)  # its weights went through fp16


def test_a_converted_module_pickles_converted(run: Run) -> None:
    fast = run.module
    try:
        fast.half()
        buffer = io.BytesIO()
        torch.save(fast, buffer)
        buffer.seek(0)
        again: OptimizedModule = torch.load(buffer, weights_only=False)
        assert every_dtype(again) == {torch.float16} and again.kernels_off is not None
    finally:
        fast.float()
    assert again.float().kernels_off is None
    assert torch.allclose(again(run.x), fast(run.x), atol=1e-4)  # the weights fp16 had, in float32
