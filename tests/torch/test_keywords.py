"""A model called with keyword arguments: a forward with a keyword-only tensor, a layer called as
`layer(hidden_states=h)`, a tuple passed by name (`position_embeddings=(cos, sin)`). `example_kwargs`
is captured by name, the module is called the same way and checks each keyword as it checks a
positional input, and the store is named for the call's structure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mugraph
from mugraph.torch import runtime
from mugraph.torch.capture import capture
from mugraph.torch.errors import CaptureError, InputMismatchError
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, inputs

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None, "verbose": False}


class Masked(nn.Module):
    """Linear and erf-GELU (searched), then a keyword-only mask (glue)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x)).masked_fill(mask, 0.0)


class Layer(nn.Module):
    """A layer its caller passes everything by name, as Hugging Face's are."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, hidden_states: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        out = F.gelu(self.fc(hidden_states))
        return out if scale is None else out * scale


class Rotary(nn.Module):
    """A tuple passed by name, and two keywords the caller may give in any order."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32, bias=False)

    def forward(
        self, x: torch.Tensor, *, pe: tuple[torch.Tensor, torch.Tensor], a: torch.Tensor, b: torch.Tensor
    ) -> Any:
        cos, sin = pe
        return self.fc(x) * cos + sin * a - b


def made(model: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return model.eval()


def test_a_keyword_only_tensor_is_captured_and_checked_by_name(workdir: Path) -> None:
    model, (x,) = made(Masked()), inputs((16, 32), dtype=torch.float32)
    mask = torch.rand(16, 64, generator=torch.Generator().manual_seed(2)) > 0.5
    fast = mugraph.optimize(model, x, example_kwargs={"mask": mask}, **OPTIONS)
    assert fast.verdict.self_check is None and fast.kernels_off is None and fast.verdict.fragments[0].kernels
    assert torch.allclose(fast(x, mask=mask), model(x, mask=mask), atol=1e-5)
    with pytest.raises(InputMismatchError, match=r"input 'mask' missing: .* passes it \(every tensor of the example"):
        fast(x)
    with pytest.raises(InputMismatchError, match=r"input 'mask' missing"):
        fast(x=x)
    with pytest.raises(InputMismatchError, match=r"input mask is \[8, 64\] torch\.bool; .* \[16, 64\] torch\.bool"):
        fast(x, mask=mask[:8])
    with pytest.raises(InputMismatchError, match=r"'other' is not a parameter of its forward \(which takes x, mask\)"):
        fast(x, mask=mask, other=mask)
    loaded = mugraph.load(fast.verdict.store)  # from the store: the keyword kept in the exported program
    assert loaded.verdict.self_check is None and torch.allclose(loaded(x, mask=mask), model(x, mask=mask), atol=1e-5)


def test_a_layer_called_by_keyword_gets_a_store_of_its_own(workdir: Path) -> None:
    """The same model and tensor by position or by name: the same searched program, two captured
    calls (the store's `.pt2` keeps the call's structure), so two stores."""
    model, (h,) = made(Layer()), inputs((16, 32), dtype=torch.float32)
    by_name, by_position = capture(model, (), example_kwargs={"hidden_states": h}), capture(model, (h,))
    assert by_name.digest == by_position.digest and by_name.model_digest != by_position.model_digest
    fast = mugraph.optimize(model, (), example_kwargs={"hidden_states": h}, **OPTIONS)
    assert torch.allclose(fast(hidden_states=h), model(hidden_states=h), atol=1e-5)
    assert torch.allclose(fast(h), model(h), atol=1e-5)  # bound by name, as the model binds it
    again = mugraph.optimize(model, (h,), **OPTIONS)
    assert Path(again.verdict.store) != Path(fast.verdict.store)


def test_a_tuple_and_keywords_in_another_order_are_bound_as_the_model_binds_them() -> None:
    model, (x, cos, sin, a, b) = (
        made(Rotary()),
        inputs((8, 32), (8, 32), (8, 32), (8, 32), (8, 32), dtype=torch.float32),
    )
    captured = capture(model, x, example_kwargs={"pe": (cos, sin), "a": a, "b": b})
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)  # the captured program, unsearched
    want = model(x, pe=(cos, sin), a=a, b=b)
    assert torch.allclose(fast(x, b=b, a=a, pe=(cos, sin)), want, atol=1e-6)
    with pytest.raises(InputMismatchError, match=r"called as \(\(\*,\), \{'pe': \(\*,\), .*optimised for"):
        fast(x, pe=(cos,), a=a, b=b)
    with pytest.raises(InputMismatchError, match=r"input 'b' missing"):
        fast(x, pe=(cos, sin), a=a)


def test_a_function_with_a_keyword_only_tensor_is_captured() -> None:
    def f(x: torch.Tensor, *, w: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w)

    x, w = inputs((16, 32), (32, 64), dtype=torch.float32)
    captured = capture(f, x, example_kwargs={"w": w})
    assert torch.allclose(OptimizedModule(captured, captured.lowering.graph)(x, w=w), f(x, w=w), atol=1e-5)


def test_example_kwargs_that_are_not_tensors_are_refused_in_one_line() -> None:
    (x,) = inputs((16, 32), dtype=torch.float32)
    with pytest.raises(CaptureError, match=r"example_kwargs\['mask'\] must be a tensor .* pass a tensor or None"):
        capture(made(Masked()), x, example_kwargs={"mask": "all"})
    # None is a constant of the call, also for a parameter without a default; this forward cannot take it
    with pytest.raises(CaptureError, match=r"cannot capture Masked at .*masked_fill\(\) received .*NoneType"):
        capture(made(Masked()), x, example_kwargs={"mask": None})
    with pytest.raises(CaptureError, match=r"passed by position and keyword mask\): got an unexpected"):
        capture(made(Layer()), x, example_kwargs={"mask": x})


def test_a_hugging_face_layer_called_with_keywords_is_captured_and_converted_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Llama's decoder layer as its model calls it: `layer(h, attention_mask=mask, position_embeddings=(cos, sin))`;
    a model holding its module converts it whole and the module then runs the converted layer."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(  # type: ignore[call-arg]  # attn_implementation: a PretrainedConfig keyword
        hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=2, attn_implementation="eager"
    )
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(config, 0).eval()
    (h,) = inputs((1, 16, 64), dtype=torch.float32)
    cos, sin = LlamaRotaryEmbedding(config)(h, torch.arange(16)[None])
    mask = torch.full((1, 1, 16, 16), float("-inf")).triu(1)
    kwargs: dict[str, Any] = {"attention_mask": mask, "position_embeddings": (cos, sin)}
    captured = capture(layer, h, example_kwargs=kwargs)
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)
    assert torch.allclose(first(fast(h, **kwargs)), first(layer(h, **kwargs)), atol=1e-5)
    holder = nn.ModuleDict({"pre": nn.Linear(64, 64), "layer": fast}).half()
    assert {t.dtype for t in (*holder.parameters(), *layer.parameters())} == {torch.float16}
    monkeypatch.setattr(runtime, "_WARNED", set())  # its warning is once per process
    half = {"attention_mask": mask.half(), "position_embeddings": (cos.half(), sin.half())}
    with pytest.warns(UserWarning, match="the kernels are off"):
        got = first(fast(h.half(), **half))
    assert torch.equal(got, first(layer(h.half(), **half)))


def first(out: Any) -> torch.Tensor:
    """The hidden states of a layer's output (a tensor, or a tuple led by it, by transformers' version)."""
    hidden: torch.Tensor = out[0] if isinstance(out, tuple) else out
    return hidden
