"""Hugging Face's Llama layers, built from a small config with random weights (nothing downloaded),
captured and lowered: their RMSNorms are rms_norm ops with the config's eps (the float32 casts inside
absorbed), their linear layers on [B, S, D] lowered matmuls, and what is left to torch is what the
IR has no op for (rotary tables, views and transposes between heads, softmax)."""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import OpKind
from mugraph.stages.fragments import split_program
from mugraph.torch.capture import Captured, capture
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_float64 import only_output
from tests.helpers.torch_models import build, float64_output, inputs, rel_err

CONFIG = LlamaConfig(  # type: ignore[call-arg]  # attn_implementation: a PretrainedConfig keyword
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=2,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    attn_implementation="eager",  # attention written out in torch ops
)


class HalfBlock(nn.Module):
    """x + LlamaMLP(LlamaRMSNorm(x)): the MLP half of a Llama decoder layer."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = LlamaRMSNorm(CONFIG.hidden_size, eps=CONFIG.rms_norm_eps)
        self.mlp = LlamaMLP(CONFIG)  # type: ignore[no-untyped-call]
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(CONFIG.hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.mlp(self.norm(x))
        return out


class Decoder(nn.Module):
    """One LlamaDecoderLayer with its rotary embedding, on positions 0..S-1, no mask."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = LlamaDecoderLayer(CONFIG, 0)
        self.rope = LlamaRotaryEmbedding(CONFIG)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1]).unsqueeze(0)
        out = self.layer(x, position_embeddings=self.rope(x, pos), attention_mask=None, position_ids=pos)
        hidden: torch.Tensor = out[0] if isinstance(out, tuple) else out
        return hidden


def _ops(c: Captured, kind: OpKind) -> list[float]:
    """The eps of each op of `kind` (norms), or 0 for each other op of it."""
    return [
        op.float_attr("eps") if any(k == "eps" for k, _ in op.attrs) else 0.0 for op in c.lowering.graph.ops_of(kind)
    ]


def _targets(c: Captured, names: tuple[str, ...]) -> Counter[str]:
    nodes = {n.name: n for n in c.exported.graph.nodes}
    return Counter(str(getattr(nodes[n].target, "__name__", nodes[n].target)).split(".")[0] for n in names)


def test_llama_rmsnorm_and_mlp_are_one_norm_and_three_matmuls() -> None:
    model = build(HalfBlock)
    args = inputs((2, 8, 64))
    c = capture(model, args)
    parts = split_program(c.lowering.graph).parts
    fragments = [[c.lowering.graph.ops[i].kind.value for i in p.op_indices] for p in parts]
    assert c.lowering.glue == (), c.lowering.describe()  # the casts, the linears on [2, 8, 64]: all lowered
    assert _ops(c, OpKind.RMS_NORM) == [CONFIG.rms_norm_eps]
    assert len(c.lowering.graph.ops_of(OpKind.MATMUL)) == 3
    assert _targets(c, c.lowering.lowered)["linear"] == 3
    assert fragments[0][:2] == ["rms_norm", "mul"], fragments  # the norm and its weight: one fragment
    assert sum(f.count("rms_norm") for f in fragments) == 1
    # in float64, as torch computes it (the float32 casts inside the norm round in torch, not here)
    assert rel_err(only_output(c, args), float64_output(model, args)) < 1e-6
    out = OptimizedModule(c, c.lowering.graph)(*args)
    assert out.shape == (2, 8, 64) and rel_err(out, model(*args)) <= FP16_TOLERANCE


def test_llama_decoder_layer_lowers_its_norms_and_linears() -> None:
    model = build(Decoder)
    args = inputs((2, 8, 64))
    c = capture(model, args)
    glue, lowered = _targets(c, c.lowering.glue), _targets(c, c.lowering.lowered)
    assert _ops(c, OpKind.RMS_NORM) == [CONFIG.rms_norm_eps] * 2
    assert lowered["linear"] == 7 and "linear" not in glue  # q, k, v, o, gate, up, down
    assert glue["softmax"] == 1 and glue["transpose"] >= 3 and glue["view"] >= 3
    assert not {"pow", "rsqrt", "mean", "_assert_tensor_metadata"} & set(glue)
    # the norms' float32 casts are lowered with them; the rotary tables' and softmax's are torch's
    assert lowered["_to_copy"] == 4
    parts = split_program(c.lowering.graph).parts
    norms = [p for p in parts if any(c.lowering.graph.ops[i].kind is OpKind.RMS_NORM for i in p.op_indices)]
    assert len(parts) >= 6 and len(norms) == 2
    out = OptimizedModule(c, c.lowering.graph)(*args)
    assert rel_err(out, model(*args)) <= FP16_TOLERANCE
