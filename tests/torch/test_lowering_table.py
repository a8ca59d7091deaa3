"""docs/torch.md's table of what common torch constructs become, as data: each row is captured and
checked (a row saying "lowered as rms_norm" finds an rms_norm op with that eps in the program), and
the table in the docs is this data, row for row."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from mugraph.ir.types import DType, OpKind
from mugraph.torch.capture import capture
from mugraph.torch.errors import CaptureError
from tests.helpers.torch_models import Branchy, inputs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "torch.md"
K = OpKind


@dataclass(frozen=True)
class Expect:
    """What a row's capture must show: program op kinds (exactly, in order, where `exact`; else each
    at least once), a norm's eps, ATen ops left to torch (by name), whether anything else is glue."""

    ops: tuple[OpKind, ...] = ()
    exact: bool = True
    eps: float | None = None
    glue: tuple[str, ...] = ()
    only_glue: bool = True  # nothing but `glue` is glue
    dtype: DType = DType.FLOAT16
    refused: str | None = None


@dataclass(frozen=True)
class Row:
    construct: str  # the docs' first column
    becomes: str  # the docs' second column
    model: Callable[[], Any]  # a module or function
    shapes: tuple[tuple[int, ...], ...]
    expect: Expect
    dtype: torch.dtype = torch.float16

    @property
    def id(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.construct.lower()).strip("-")[:40]


def _scaled_twice(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = x @ w
    return h, h * 1.702


def _gelu_written(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x @ w
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))


def _silu_written(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x @ w
    return h * torch.sigmoid(h)


def _half(m: nn.Module) -> Callable[[], nn.Module]:
    return lambda: m.half().eval()


def written_rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def written_ln(x: torch.Tensor) -> torch.Tensor:
    d = x - x.mean(-1, keepdim=True)
    return d / torch.sqrt(d.pow(2).mean(-1, keepdim=True) + 1e-5)


def deberta_ln(x: torch.Tensor) -> torch.Tensor:
    """DeBERTa's LayerNorm: `x - mean` written twice, in float32."""
    h = x.float()
    mean = h.mean(-1, keepdim=True)
    var = (h - mean).pow(2).mean(-1, keepdim=True)
    return ((h - mean) / torch.sqrt(var + 1e-7)).to(x.dtype)


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


class ScaledNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(x) * 2.0 + x
        return out


def rotary(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    return q * cos + rotated * sin


def float32_island(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.float().exp() @ w.float()).to(x.dtype) @ w.t()


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(32, 64), nn.Linear(64, 64, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(self.emb(ids))
        return out


def _ids() -> tuple[torch.Tensor]:
    return (torch.arange(8).reshape(2, 4),)


ROWS: list[Row] = [
    Row(
        "`F.rms_norm(x, (d,), w, eps)`, `nn.RMSNorm`",
        "lowered: `rms_norm(x, eps)` · w",
        _half(nn.RMSNorm(64, eps=1e-5)),
        ((8, 64),),
        Expect((K.RMS_NORM, K.MUL), eps=1e-5),
    ),
    Row(
        "`F.rms_norm(x, (d,))` (eps=None)",
        "lowered: `rms_norm(x, eps)`, eps = `torch.finfo(dtype).eps`",
        lambda: lambda x: F.rms_norm(x, (64,)),
        ((8, 64),),
        Expect((K.RMS_NORM,), eps=2.0**-10),
    ),
    Row(
        "RMSNorm written out: `x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w` (x·x or square; sum/n; "
        "1/sqrt or / sqrt; w either side)",
        "lowered: `rms_norm(x, eps)` · w, one op",
        lambda: written_rms,
        ((2, 4, 64), (64,)),
        Expect((K.RMS_NORM, K.MUL), eps=1e-6),
    ),
    Row(
        "Hugging Face `LlamaRMSNorm` (to float32, normalise, back to the input dtype, times w)",
        "lowered: `rms_norm(x, eps)` · w; the casts are part of it",
        _half(LlamaRMSNorm(64, eps=1e-5)),
        ((2, 4, 64),),
        Expect((K.RMS_NORM, K.MUL), eps=1e-5),
    ),
    Row(
        "Hugging Face `GemmaRMSNorm` (to float32, normalise, times `1 + w`, back with `type_as`)",
        "lowered: `rms_norm(x, eps)` · (1 + w); torch makes 1 + w as the weight input",
        _half(GemmaRMSNorm(64, eps=1e-6)),
        ((2, 4, 64),),
        Expect((K.RMS_NORM, K.MUL), eps=1e-6),
    ),
    Row(
        "`nn.LayerNorm`, `F.layer_norm` (with weight and bias)",
        "lowered: `layer_norm(x, eps)` · w + b",
        _half(nn.LayerNorm(64, eps=1e-5)),
        ((8, 64),),
        Expect((K.LAYER_NORM, K.MUL, K.ADD), eps=1e-5),
    ),
    Row(
        "`nn.LayerNorm(d, elementwise_affine=False)`",
        "lowered: `layer_norm(x, eps)`",
        _half(nn.LayerNorm(64, eps=1e-6, elementwise_affine=False)),
        ((2, 4, 64),),
        Expect((K.LAYER_NORM,), eps=1e-6),
    ),
    Row(
        "LayerNorm written out: `(x - mean) / sqrt(var + eps)` (`var(unbiased=False)` or mean of squares)",
        "lowered: `layer_norm(x, eps)`, one op",
        lambda: written_ln,
        ((8, 64),),
        Expect((K.LAYER_NORM,), eps=1e-5),
    ),
    Row(
        "LayerNorm with `x - mean` written twice, in float32 (DeBERTa's)",
        "lowered: `layer_norm(x, eps)`, one op (one value computed twice is one value)",
        lambda: deberta_ln,
        ((8, 64),),
        Expect((K.LAYER_NORM,), eps=1e-7),
    ),
    Row("`F.silu`, `nn.SiLU`", "lowered: `silu`", _half(nn.SiLU()), ((8, 64),), Expect((K.SILU,), only_glue=False)),
    Row(
        "`F.gelu`, `nn.GELU()` (erf form)",
        "lowered: `gelu_erf`",
        lambda: lambda x, w: F.gelu(x @ w),
        ((8, 64), (64, 32)),
        Expect((K.MATMUL, K.GELU_ERF)),
    ),
    Row(
        '`F.gelu(approximate="tanh")`',
        "lowered: `gelu`",
        lambda: lambda x, w: F.gelu(x @ w, approximate="tanh"),
        ((8, 64), (64, 32)),
        Expect((K.MATMUL, K.GELU)),
    ),
    Row(
        "GELU written out: GPT-2's `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))`, Hugging Face "
        "`NewGELUActivation`, `FastGELUActivation`; BERT's `x * 0.5 * (1 + erf(x / sqrt(2)))`",
        "lowered: `gelu` (tanh) or `gelu_erf`, one op: recognised by its values, whatever the spelling",
        lambda: _gelu_written,
        ((8, 64), (64, 32)),
        Expect((K.MATMUL, K.GELU)),
    ),
    Row(
        "`x.view(-1, d)` and back around a matmul (GPT-2's `Conv1D`: `addmm` on [B·S, D]), "
        "a `reshape` keeping the rows",
        "lowered: the value itself, no op (a view of a model input stays glue, as does a view that changes the rows: "
        "heads split out)",
        lambda: lambda x, w, b: torch.relu(torch.addmm(b, x.view(-1, 64), w).view(2, 8, 32)),
        ((2, 8, 64), (64, 32), (32,)),
        Expect((K.MATMUL, K.ADD, K.RELU), glue=("view",)),
    ),
    Row(
        "SiLU written out: `x * torch.sigmoid(x)`, `x / (1 + exp(-x))`",
        "lowered: `silu`, one op (`torch.sigmoid` alone, or `x * sigmoid(1.702 * x)`, stays glue)",
        lambda: _silu_written,
        ((8, 64), (64, 32)),
        Expect((K.MATMUL, K.SILU)),
    ),
    Row(
        "`F.relu`, `nn.ReLU`",
        "lowered: `relu` (not LAX: a fragment boundary)",
        lambda: lambda x, w: torch.relu(x @ w),
        ((8, 64), (64, 32)),
        Expect((K.MATMUL, K.RELU)),
    ),
    Row(
        "`nn.Linear` on `[N, D]`",
        "lowered: matmul with W.T (a view of W), + bias",
        _half(nn.Linear(64, 32)),
        ((8, 64),),
        Expect((K.MATMUL, K.ADD)),
    ),
    Row(
        "`x @ w.T`, `w.t()`, `w.permute(1, 0)` of a 2-d weight or input (Falcon's linear)",
        "lowered: matmul with W.T read in place, as `nn.Linear`'s; a transpose of a lowered value stays glue",
        lambda: lambda x, w: x @ w.T,
        ((8, 64), (32, 64)),
        Expect((K.MATMUL,)),
    ),
    Row(
        "`nn.Linear` on `[B, S, D]`",
        "lowered: matmul on `[B·S, D]` (the program of the 2-d input)",
        _half(nn.Linear(64, 32)),
        ((2, 4, 64),),
        Expect((K.MATMUL, K.ADD)),
    ),
    Row(
        "`x @ w`, x `[B, S, K]`, w `[K, N]`",
        "lowered: matmul on `[B·S, K]`",
        lambda: lambda x, w: x @ w,
        ((2, 4, 64), (64, 32)),
        Expect((K.MATMUL,)),
    ),
    Row(
        "`torch.einsum` that is a matmul by a matrix: `bsd,df->bsf`, `...d,fd->...f`",
        "lowered: matmul on `[B·S, D]` (a `fd` matrix read transposed in place); any other einsum stays glue",
        lambda: lambda x, w: torch.einsum("bsd,fd->bsf", x, w),
        ((2, 4, 64), (32, 64)),
        Expect((K.MATMUL,)),
    ),
    Row(
        "a linear's output split along its last dim: `gate, up = self.w12(x).chunk(2, -1)` (`split` too)",
        "lowered: one matmul (+ bias) per piece, over its rows of W (and b), where every piece is read by a "
        "lowered op and the pieces fall in one fragment (the search can fuse them); the whole linear never runs",
        lambda: lambda x, w: [torch.relu(p) for p in F.linear(x, w).chunk(2, dim=-1)],
        ((2, 4, 64), (64, 64)),
        Expect((K.MATMUL, K.MATMUL, K.RELU, K.RELU)),
    ),
    Row(
        "a split linear's piece only returned or read by glue (`q, k, v = self.qkv(x).split(d, -1)`), or pieces "
        "in separate fragments",
        "lowered: the linear whole, one matmul as the model makes it; the split: glue",
        lambda: lambda x, w: [torch.relu(p) if i == 0 else p for i, p in enumerate(F.linear(x, w).chunk(2, dim=-1))],
        ((2, 4, 64), (64, 64)),
        Expect((K.MATMUL, K.RELU), glue=("split", "getitem", "getitem")),
    ),
    Row(
        "`torch.bmm`, `a @ b` with equal batch dims",
        "lowered: batched matmul",
        lambda: torch.bmm,
        ((2, 8, 64), (2, 64, 16)),
        Expect((K.MATMUL,)),
    ),
    Row(
        "`torch.baddbmm(bias, a, b)` (attention scores with a bias, as BLOOM computes them)",
        "lowered: batched matmul + the bias (broadcast over its 1-dims), where beta and alpha are 1; else glue",
        lambda: torch.baddbmm,
        ((2, 1, 16), (2, 8, 64), (2, 64, 16)),
        Expect((K.MATMUL, K.ADD)),
    ),
    Row(
        "attention scores `q @ k.transpose(-2, -1) / sqrt(d)`",
        "transpose: glue (k.T enters as an input); matmul lowered, the scale folded into q",
        lambda: attention_scores,
        ((2, 8, 32), (2, 8, 32)),
        Expect((K.MATMUL,), glue=("transpose",)),
    ),
    Row(
        "a product with a weight times a constant: `norm(x) * 2.0`, LoRA's `lora_b(lora_a(x)) * alpha / r`",
        "lowered without a scalar op: the constant folded into the weight (w, B) where the product has no other "
        "reader and the weight is no larger than it",
        _half(ScaledNorm()),
        ((16, 64),),
        Expect((K.RMS_NORM, K.MUL, K.ADD)),
    ),
    Row(
        "any other constant multiply or divide, `-x`, a mean's 1/n (`h * 1.702`, where h has another reader)",
        "lowered: a mul by a constant input [1, 1] of the program's dtype (the search has no scalar op); "
        "times 1.0 is its operand",
        lambda: _scaled_twice,
        ((8, 64), (64, 32)),
        Expect((K.MATMUL, K.MUL)),
    ),
    Row(
        "`torch.softmax`, `F.softmax`",
        "glue (the IR has no max: exp without torch's max shift overflows fp16)",
        lambda: lambda x, y: torch.softmax(x @ y, dim=-1),
        ((8, 16), (16, 64)),
        Expect((K.MATMUL,), glue=("softmax",)),
    ),
    Row(
        "`nn.GroupNorm` (a UNet's, a ConvNeXt's), `nn.BatchNorm1d/2d` in eval mode",
        "glue (the IR's norms act on the last dim; these normalise over channels or groups of them)",
        lambda: _half(nn.Sequential(nn.GroupNorm(4, 16), nn.ReLU(), nn.BatchNorm2d(16), nn.ReLU()))(),
        ((2, 16, 8, 8),),
        Expect((K.RELU, K.RELU), glue=("group_norm", "_native_batch_norm_legit_no_training", "getitem")),
    ),
    Row(
        "`F.scaled_dot_product_attention`",
        "glue",
        lambda: lambda q, k, v: F.scaled_dot_product_attention(q @ q.transpose(-1, -2), k, v),
        ((2, 8, 8), (2, 8, 8), (2, 8, 8)),
        Expect((K.MATMUL,), glue=("transpose", "scaled_dot_product_attention")),
    ),
    Row(
        "`.to(torch.float32)` and float32 ops in an fp16 model (outside a norm)",
        "glue (the program computes in the model's dtype)",
        lambda: float32_island,
        ((8, 64), (64, 64)),
        Expect((K.MATMUL,), glue=("_to_copy", "exp", "_to_copy", "matmul", "_to_copy")),
    ),
    Row(
        "a float32 model",
        "lowered in float32",
        lambda: nn.Sequential(nn.Linear(64, 64), nn.GELU()).eval(),
        ((8, 64),),
        Expect((K.MATMUL, K.ADD, K.GELU_ERF), dtype=DType.FLOAT32),
        dtype=torch.float32,
    ),
    Row(
        "`nn.Dropout` (eval)",
        "nothing: eval's copy of a lowered value is that value",
        _half(nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.1))),
        ((8, 64),),
        Expect((K.MATMUL, K.ADD)),
    ),
    Row(
        "`nn.Embedding`",
        "glue (the lookup); its rows enter the program as an input",
        _half(Embed()),
        (),
        Expect((K.MATMUL,), glue=("embedding",)),
    ),
    Row(
        "rotary embeddings (`rotate_half`: slices, neg, cat; q·cos + rotate_half(q)·sin)",
        "slices: glue; neg, cat, the products and the sum: lowered",
        lambda: rotary,
        ((1, 2, 8, 32), (8, 32), (8, 32)),
        Expect((K.MUL, K.CONCAT, K.MUL, K.MUL, K.ADD), glue=("slice", "slice"), exact=False),
    ),
    Row(
        "`torch.cond`, `while_loop`, other higher-order ops",
        "refused: one `CaptureError` naming the op and its line",
        lambda: Branchy().eval(),
        ((16, 16),),
        Expect(refused=r"^cond \(cond, at .*torch_models\.py:\d+\) can be neither lowered"),
    ),
]


def _target_name(node: torch.fx.Node) -> str:
    return str(getattr(node.target, "__name__", node.target)).split(".")[0]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_row_is_what_the_capture_does(row: Row) -> None:
    model = row.model()
    args = _ids() if not row.shapes else inputs(*row.shapes, dtype=row.dtype)
    want = row.expect
    if want.refused is not None:
        with pytest.raises(CaptureError, match=want.refused):
            capture(model, args)
        return
    c = capture(model, args)
    kinds: list[OpKind] = [op.kind for op in c.lowering.graph.ops if op.kind not in (K.INPUT, K.OUTPUT)]
    if want.exact:
        assert kinds == list(want.ops), c.lowering.describe()
    else:
        assert all(kinds.count(k) >= list(want.ops).count(k) for k in want.ops), c.lowering.describe()
    assert {t.dtype for t in c.lowering.graph.tensors} == {want.dtype}
    if want.eps is not None:
        (norm,) = [op for op in c.lowering.graph.ops if op.kind in (K.RMS_NORM, K.LAYER_NORM)]
        assert norm.float_attr("eps") == pytest.approx(want.eps, rel=1e-9)
    nodes = {n.name: n for n in c.exported.graph.nodes}
    glue = sorted(_target_name(nodes[g]) for g in c.lowering.glue)
    if want.only_glue:
        assert glue == sorted(want.glue)
    else:
        assert set(want.glue) <= set(glue)


def _docs_rows() -> list[tuple[str, str]]:
    text = DOCS.read_text()
    section = text.split("## What is lowered, what stays glue", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| ---")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in rows[1:]]  # the header aside
    return [(c[0].replace("\\|", "|"), c[1].replace("\\|", "|")) for c in cells]


def test_the_docs_table_is_this_data() -> None:
    assert _docs_rows() == [(r.construct, r.becomes) for r in ROWS]
