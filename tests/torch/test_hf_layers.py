"""A Hugging Face decoder layer optimised as its model calls it and put back into the model: the tuple
it takes by name (`position_embeddings=(cos, sin)`) is flattened and bound as tensors are, the
arguments its model adds (`cache=None`, `use_cache=False`) are taken where they equal what the capture
computed with, and a KV cache object is refused saying that the layer was captured without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

import mugraph
from mugraph.torch.capture import capture
from mugraph.torch.errors import CaptureError, InputMismatchError
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS

OPTIONS: dict[str, Any] = {
    "workers": 1,
    "settings": GELU_LINEAR_SETTINGS,
    "dashboard_address": None,
    "verbose": False,
    "time_limit": 4,
}
TENSORS = ("attention_mask", "position_embeddings", "position_ids")


def _model(attn: str = "eager") -> LlamaForCausalLM:
    config = LlamaConfig(  # type: ignore[call-arg]  # attn_implementation: a PretrainedConfig keyword
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        vocab_size=128,
        attn_implementation=attn,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.train(False)  # eval mode (transformers' own eval() is untyped)
    return model


def _layer_call(model: LlamaForCausalLM, ids: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments the model passes its first decoder layer, as a forward pre-hook sees them."""
    seen: dict[str, Any] = {}
    hook = model.model.layers[0].register_forward_pre_hook(
        lambda m, a, k: seen.update(args=a, kwargs=k), with_kwargs=True
    )
    with torch.no_grad():
        model(ids, use_cache=False)
    hook.remove()
    return seen["args"], seen["kwargs"]


def test_an_optimized_llama_layer_put_back_into_its_model_gives_the_models_logits(workdir: Path) -> None:
    model, ids = _model(), torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
    args, kwargs = _layer_call(model, ids)
    assert isinstance(kwargs["position_embeddings"], tuple) and kwargs["use_cache"] is False
    tensors = {k: kwargs[k] for k in TENSORS}
    layer = model.model.layers[0]
    fast = mugraph.optimize(layer, args, example_kwargs=tensors, **OPTIONS)
    assert fast.verdict.self_check is None and fast.kernels_off is None
    assert any(f.kernels for f in fast.verdict.fragments)  # kernels run, not only the reference
    (h,) = args
    # the tuple bound as tensors are: by name, the hidden states by name too, keywords in any order
    by_name = fast(position_ids=tensors["position_ids"], hidden_states=h, **{k: tensors[k] for k in TENSORS[:2]})
    assert torch.allclose(by_name, layer(h, **tensors), atol=1e-5)
    model.model.layers[0] = fast
    with torch.no_grad():
        got = model(ids, use_cache=False).logits  # the model adds cache=None, use_cache=False: the defaults
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())
    with pytest.raises(
        InputMismatchError, match=r"cache is a DynamicCache .* captured with cache=None .* use_cache=False"
    ):
        model(ids)  # use_cache on: the model hands the layer a cache it would not fill
    loaded = mugraph.load(fast.verdict.store)  # from the store: the tuple kept in the exported program
    assert loaded.verdict.self_check is None
    assert torch.allclose(loaded(h, **tensors), layer(h, **tensors), atol=1e-5)
    model.model.layers[0] = loaded  # no model at hand: the forward's defaults are kept in the store's file
    with torch.no_grad():
        got = model(ids, use_cache=False).logits
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_arguments_the_example_call_left_out_are_taken_at_their_defaults_and_refused_otherwise() -> None:
    model, ids = _model("sdpa"), torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    args, kwargs = _layer_call(model, ids)
    layer = model.model.layers[0]
    example = {k: kwargs[k] for k in TENSORS}  # with sdpa, no mask: attention_mask=None, a constant
    assert example["attention_mask"] is None
    captured = capture(layer, args, example_kwargs=example)
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)  # the captured program, unsearched
    (h,) = args
    want = layer(h, **example)
    assert torch.allclose(fast(h, **example, cache=None, use_cache=False), want, atol=1e-5)
    without_mask = {k: v for k, v in example.items() if k != "attention_mask"}
    assert torch.allclose(fast(h, **without_mask), want, atol=1e-5)  # a constant omitted: as captured
    with pytest.raises(InputMismatchError, match=r"use_cache=True, where the module was captured with use_cache=False"):
        fast(h, **example, use_cache=True)
    mask = torch.zeros(1, 1, 8, 8)
    with pytest.raises(
        InputMismatchError, match=r"attention_mask=a \[1, 1, 8, 8\] torch.float32 tensor, where .*=None"
    ):
        fast(h, **without_mask, attention_mask=mask)
    with pytest.raises(InputMismatchError, match=r"cache is a DynamicCache \(a KV cache\).* use_cache=False"):
        fast(h, **example, cache=DynamicCache(config=model.config))
    with pytest.raises(InputMismatchError, match=r"input position_ids is None, where the example call passed"):
        fast(h, **{**example, "position_ids": None})
    with pytest.raises(InputMismatchError, match=r"got 7 \(attention_mask, .*, argument 7 are None\)"):
        fast(h, None, None, None, None, None, None)  # hidden_states, attention_mask, ..., 7 by position


class _Flags(torch.nn.Module):
    """A layer with an optional mask and a flag, as Whisper's and older Hugging Face layers take them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 64, bias=False)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, output_attentions: bool = True, scale: float = 1.0
    ) -> Any:
        y = torch.nn.functional.gelu(self.fc(x)) * scale
        y = y if mask is None else y + mask
        return (y, y.sum(-1)) if output_attentions else y


def test_constants_in_example_kwargs_are_fixed_and_a_different_value_is_refused() -> None:
    torch.manual_seed(0)
    model, x = _Flags().eval(), torch.randn(16, 32)
    example = {"mask": None, "output_attentions": False, "scale": 0.5}
    captured = capture(model, x, example_kwargs=example)
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)
    want = model(x, **example)
    assert isinstance(want, torch.Tensor)  # output_attentions=False was captured, not the default True
    for call in (example, {"scale": 0.5, "output_attentions": False}):  # mask=None: the default, left out
        assert torch.allclose(fast(x, **call), want, atol=1e-6)
    # left out, the model would compute with the forward's defaults (output_attentions=True, scale=1.0),
    # not with the captured constants: refused, never the captured call's answer to another question
    with pytest.raises(InputMismatchError, match=r"output_attentions left out, .* default output_attentions=True"):
        fast(x)
    with pytest.raises(InputMismatchError, match=r"scale left out, .*scale=1\.0; .*captured with scale=0\.5"):
        fast(x, output_attentions=False)
    with pytest.raises(InputMismatchError, match=r"output_attentions=True, where the module was captured with outp"):
        fast(x, output_attentions=True)
    with pytest.raises(InputMismatchError, match=r"scale=2\.0, where .* scale=0\.5 \(in the example call\)"):
        fast(x, output_attentions=False, scale=2.0)
    # NumPy scalars are the numbers and flags they hold: equal ones taken, others refused as numbers are
    assert torch.allclose(fast(x, output_attentions=np.bool_(False), scale=np.float32(0.5)), want, atol=1e-6)
    with pytest.raises(InputMismatchError, match=r"scale=0\.25, where .* scale=0\.5"):
        fast(x, output_attentions=False, scale=np.float64(0.25))
    assert capture(model, x, example_kwargs={"scale": 2.0}).model_digest != captured.model_digest


def test_a_constant_for_a_required_argument_is_refused_at_capture() -> None:
    def f(x: torch.Tensor, *, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w)

    refused = r"example_kwargs\['w'\] must be a tensor .*w has no default in the forward: pass a tensor or None"
    with pytest.raises(CaptureError, match=refused):
        capture(f, torch.randn(16, 32), example_kwargs={"w": 3})


def test_a_model_returning_its_kv_cache_is_refused_with_the_use_cache_hint() -> None:
    model, ids = _model(), torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    with pytest.raises(CaptureError, match=r"DynamicCache.*example_kwargs=\{'use_cache': False\}"):
        capture(model, ids)  # use_cache on (the config's default): the model returns a DynamicCache
    with pytest.raises(CaptureError, match=r"example_kwargs\['cache'\] is a DynamicCache, a KV cache.*use_cache"):
        capture(model, ids, example_kwargs={"cache": DynamicCache(config=model.config)})
    captured = capture(model, ids, example_kwargs={"use_cache": False})
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        with pytest.raises(InputMismatchError, match=r"use_cache left out, .*default use_cache=None"):
            fast(ids)  # the model would then take its config's use_cache (True), not the captured False
        assert torch.allclose(fast(ids, use_cache=False, attention_mask=None).logits, want, atol=1e-5)
    with pytest.raises(InputMismatchError, match=r"use_cache=True, where the module was captured with use_cache=False"):
        fast(ids, use_cache=True)


def _family(family: str) -> tuple[Any, Any]:
    """A tiny model of `family`'s list of layers, and what runs the model: (layers, run)."""
    import transformers

    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    if family == "whisper":
        config: Any = transformers.WhisperConfig(
            d_model=64,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            num_mel_bins=16,
            max_source_positions=16,
            vocab_size=128,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        )
        model: Any = transformers.WhisperModel(config).train(False)
        feats = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(2))
        return model.encoder.layers, lambda: model.encoder(feats).last_hidden_state
    if family == "gpt2":
        model = transformers.GPT2Model(transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=128))
        layers = model.h
    elif family == "falcon":
        config = transformers.FalconConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, vocab_size=128)
        model = transformers.FalconModel(config)
        layers = model.h
    else:
        config = transformers.BertConfig(
            hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=1, vocab_size=128
        )
        model = transformers.BertModel(config)
        layers = model.encoder.layer
    model.train(False)
    return layers, lambda: model(ids, use_cache=False).last_hidden_state


@pytest.mark.parametrize("family", ["gpt2", "bert", "falcon", "whisper"])
def test_a_layer_called_with_none_by_position_is_captured_as_its_model_calls_it(family: str) -> None:
    """GPT-2's and BERT's models pass their layers None by position and in **kwargs (`position_ids=None`),
    Falcon's `alibi=None` and Whisper's encoder `attention_mask=None` by position, to parameters without
    a default: captured as the model calls it, the layer put back gives the model's outputs."""
    layers, run = _family(family)
    seen: dict[str, Any] = {}
    hook = layers[0].register_forward_pre_hook(lambda m, a, k: seen.update(args=a, kwargs=k), with_kwargs=True)
    with torch.no_grad():
        want = run()
    hook.remove()
    assert None in seen["args"] or None in seen["kwargs"].values()  # what the capture once refused
    captured = capture(layers[0], seen["args"], example_kwargs=seen["kwargs"])
    layers[0] = OptimizedModule(captured, captured.lowering.graph, share=True)
    with torch.no_grad():
        got = run()
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


def test_none_for_a_required_argument_is_a_constant_of_the_call() -> None:
    """None passed to a parameter without a default is captured as the call's constant: a call passing
    None again is taken, one passing a tensor there is refused naming it."""

    def f(x: torch.Tensor, bias: torch.Tensor | None, *, scale: torch.Tensor | None) -> torch.Tensor:
        y = torch.nn.functional.gelu(x @ x.T)
        return y if bias is None else y + bias

    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(3))
    captured = capture(f, (x, None), example_kwargs={"scale": None})
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)
    assert torch.allclose(fast(x, None, scale=None), f(x, None, scale=None), atol=1e-6)
    with pytest.raises(InputMismatchError, match=r"bias"):
        fast(x, torch.ones(8), scale=None)


def test_a_layer_captured_all_by_name_is_called_by_position_as_its_model_calls_it() -> None:
    """Captured as `layer(hidden_states=h, position_embeddings=(cos, sin), ...)`, called as the model calls
    it, `layer(h, position_embeddings=(cos, sin), ...)`: the tuple beside it once made the call refused."""
    model, ids = _model(), torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    (h,), kwargs = _layer_call(model, ids)
    layer, tensors = model.model.layers[0], {k: kwargs[k] for k in TENSORS}
    captured = capture(layer, (), example_kwargs={"hidden_states": h, **tensors})
    fast = OptimizedModule(captured, captured.lowering.graph, share=True)
    assert torch.allclose(fast(h, **tensors), layer(h, **tensors), atol=1e-5)
    with pytest.raises(InputMismatchError, match=r"input 'hidden_states' given twice"):
        fast(h, hidden_states=h, **tensors)
