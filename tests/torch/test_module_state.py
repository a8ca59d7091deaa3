"""The drop-in module's weights and buffers on a real run: a model that differs only in its glue (a
slope torch runs as written) is another run, a pickle keeps the buffers `state_dict()` leaves out and
refuses a store that now holds another model's run, a weight of the wrong shape is refused at the call
instead of read past its end, and a dtype conversion converts the model too, whole."""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.run.options import default_store
from mugraph.storage.run.store import RunStore
from mugraph.torch.capture import capture
from mugraph.torch.errors import InputMismatchError, TorchError
from mugraph.torch.runtime import OptimizedModule
from mugraph.torch.self_check import UNCHECKED_STATEFUL
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, inputs

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class LeakyGelu(nn.Module):
    """A linear layer and erf-GELU (searched), a non-persistent buffer added, then leaky_relu with a
    slope (glue: torch runs it as written, so the slope is not in the searched program)."""

    shift: torch.Tensor

    def __init__(self, slope: float) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)
        self.slope = slope
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, 64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(F.gelu(self.fc(x)) + self.shift, self.slope)


def model(slope: float) -> LeakyGelu:
    torch.manual_seed(0)
    return LeakyGelu(slope).eval()


@dataclass(frozen=True)
class Run:
    model: LeakyGelu
    x: tuple[torch.Tensor, ...]
    module: OptimizedModule
    store: Path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    cwd, before = tmp_path_factory.mktemp("cwd"), Path.cwd()
    os.chdir(cwd)
    try:
        m, x = model(0.01), inputs((16, 32), dtype=torch.float32)
        fast = mugraph.optimize(m, x, **OPTIONS)
        yield Run(m, x, fast, Path(fast.verdict.store).resolve())
    finally:
        os.chdir(before)


def test_models_that_differ_in_their_glue_alone_have_stores_of_their_own(run: Run) -> None:
    """The slope is not in the searched program (the same program digest) but is in the model's, which
    the store's identity holds and its default name is made from."""
    x = inputs((16, 32), dtype=torch.float32)
    one, other = capture(model(0.01), x), capture(model(0.5), x)
    assert one.digest == other.digest and one.model_digest != other.model_digest
    assert one.model_digest == capture(model(0.01), x).model_digest  # the same model, the same digest
    with RunStore.open_existing(run.store) as st:
        identity = dict(st.identity)
    assert identity["model_digest"] == one.model_digest
    assert default_store("LeakyGelu", identity) == Path("runs") / run.store.name
    elsewhere = default_store("LeakyGelu", {**identity, "model_digest": other.model_digest})
    assert elsewhere != default_store("LeakyGelu", identity)


def test_a_pickle_keeps_the_buffers_state_dict_leaves_out(run: Run) -> None:
    fast = run.module
    assert "shift" not in fast.state_dict() and "shift" in dict(fast.named_buffers())
    saved = run.model.shift.clone()
    try:
        with torch.no_grad():
            run.model.shift.mul_(3.0)  # the model's buffer, which the module shares
        want = run.model(*run.x)
        assert torch.allclose(fast(*run.x), want, atol=1e-4)
        buffer = io.BytesIO()
        torch.save(fast, buffer)
        buffer.seek(0)
        again = torch.load(buffer, weights_only=False)
        assert torch.allclose(again(*run.x), want, atol=1e-4)
    finally:
        with torch.no_grad():
            run.model.shift.copy_(saved)


def test_a_weight_of_another_shape_is_refused_at_the_call(run: Run) -> None:
    fast = run.module
    fc = fast.get_submodule("fc")
    weight = fast.get_parameter("fc.weight")
    try:
        fc.weight = nn.Parameter(torch.randn(64, 16), requires_grad=False)
        with pytest.raises(
            InputMismatchError,
            match=r"fc\.weight is \[64, 16\] torch\.float32; this module was optimised for \[64, 32\]",
        ):
            fast(*run.x)
        fc.weight = nn.Parameter(weight.detach().double(), requires_grad=False)
        with pytest.raises(InputMismatchError, match=r"fc\.weight is .* torch\.float64"):
            fast(*run.x)
    finally:
        fc.weight = weight
    assert torch.allclose(fast(*run.x), run.model(*run.x), atol=1e-4)


def test_a_dtype_conversion_converts_the_model_too_and_runs_its_forward(run: Run) -> None:
    """The module shares the model's tensors: a conversion of it is one of the model, whole (its
    buffers too, still shared), and the module then runs the converted model's forward; converting back
    turns its kernels on again."""
    fast = run.module
    conversions: list[Callable[[nn.Module], nn.Module]] = [
        lambda m: m.half(),
        lambda m: m.to(torch.bfloat16),
        lambda m: m.double(),
    ]
    saved = {k: v.clone() for k, v in run.model.state_dict().items()}
    try:
        for convert in conversions:
            assert convert(fast) is fast and fast.kernels_off is not None
            dtype = run.model.fc.weight.dtype
            assert (
                dtype != torch.float32
                and run.model.shift.dtype == dtype
                and fast.get_buffer("shift") is run.model.shift
            )
            x = run.x[0].to(dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert torch.equal(fast(x), run.model(x))
            fast.float()
            run.model.load_state_dict(saved)
    finally:
        fast.float()
        run.model.load_state_dict(saved)
    assert fast.kernels_off is None and fast.to("cpu") is fast
    assert torch.allclose(fast(*run.x), run.model(*run.x), atol=1e-4)


def test_a_conversion_back_to_the_optimised_dtypes_is_allowed(run: Run) -> None:
    """After `model.half()` (the module shares its weights: its next call is refused), `fast.float()`
    puts back the dtypes it was optimised for."""
    saved = {k: v.clone() for k, v in run.model.state_dict().items()}
    fast = run.module
    try:
        run.model.half()
        with pytest.raises(InputMismatchError, match=r"fc\.weight is \[64, 32\] torch\.float16"):
            fast(*run.x)
        assert fast.float() is fast and run.model.fc.weight.dtype == torch.float32
    finally:
        run.model.float().load_state_dict(saved)
        run.model.shift = fast.get_buffer("shift")  # torch's conversions replace buffers: share it again
    assert torch.allclose(fast(*run.x), run.model(*run.x), atol=1e-4)


class Tied(nn.Module):
    """Two linear layers sharing one weight (as an embedding and its output head do)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 32, bias=False)
        self.b = nn.Linear(32, 32, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.b(F.gelu(self.a(x)))
        return out


def test_a_pickle_keeps_a_tied_weight_under_each_of_its_names(tmp_path: Path) -> None:
    torch.manual_seed(0)
    tied, x = Tied().eval(), inputs((16, 32), dtype=torch.float32)
    fast = mugraph.optimize(tied, x, store=tmp_path / "s.zarr", **OPTIONS)
    with torch.no_grad():
        tied.a.weight.mul_(-2.0)  # after the run, as an optimizer step would
    want = tied(*x)
    buffer = io.BytesIO()
    torch.save(fast, buffer)
    buffer.seek(0)
    assert torch.allclose(torch.load(buffer, weights_only=False)(*x), want, atol=1e-4)


def test_an_unpickled_module_refuses_a_store_made_again_for_another_model(run: Run, tmp_path: Path) -> None:
    """A pickle names its store; `fresh` made that store again for a model with another slope, so the
    pickle no longer describes what the store holds."""
    import shutil

    store = tmp_path / "copy.zarr"
    shutil.copytree(run.store, store)
    shutil.copy(run.store.with_suffix(".torch.pt2"), store.with_suffix(".torch.pt2"))
    first = mugraph.load(store)
    pickled = io.BytesIO()
    torch.save(first, pickled)
    other = model(0.5)
    mugraph.optimize(other, run.x, store=store, fresh=True, **OPTIONS)
    pickled.seek(0)
    with pytest.raises(TorchError, match="now holds the run of another model"):
        torch.load(pickled, weights_only=False)
    assert torch.allclose(mugraph.load(store)(*run.x), other(*run.x), atol=1e-4)


class Noisy(nn.Module):
    """A random op in the forward: the model's outputs differ from one call to the next."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc(x))
        return h + 0.5 * torch.randn_like(h)


def test_a_model_with_a_random_op_is_said_to_vary_not_blamed_on_mugraph(tmp_path: Path) -> None:
    fast = mugraph.optimize(Noisy().eval(), inputs((16, 32), dtype=torch.float32), store=tmp_path / "s.zarr", **OPTIONS)
    (note,) = [n for n in fast.verdict.notes() if "random op" in n]
    assert fast.verdict.model_varies and fast.verdict.self_check is not None
    assert "differ from one call to the next" in note and "please report it" not in note


class Counted(nn.Module):
    """gelu(fc(x)) that counts its calls in a buffer: the check before `optimize` returns would count one
    call its caller never made, so it is not run, and the verdict says so."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.get_buffer("calls").add_(1)
        return F.gelu(self.fc(x))


def test_a_model_that_writes_its_buffers_is_said_to_be_unchecked(tmp_path: Path) -> None:
    model, x = Counted().eval(), inputs((16, 32), dtype=torch.float32)
    fast = mugraph.optimize(model, x, store=tmp_path / "s.zarr", **OPTIONS)
    assert fast.verdict.unchecked == UNCHECKED_STATEFUL and fast.verdict.self_check is None
    assert any(n.startswith("the module was not checked against the model: it writes") for n in fast.verdict.notes())
    assert float(model.get_buffer("calls")) == 0.0  # nothing ran it on the caller's behalf
    torch.testing.assert_close(fast(*x), F.gelu(model.fc(*x)), atol=1e-5, rtol=1e-5)
    assert float(model.get_buffer("calls")) == 1.0  # the module counts the call, as the model would
