"""The norms torch users write become one IR op each (graph structure; the numbers are checked in
test_semantics.py): F.rms_norm and its written spellings, with and without the casts that set their
precision, nn.LayerNorm and its written form; and what is not a norm stays what it was."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mugraph.ir.types import OpKind
from mugraph.stages.fragments import split_program
from mugraph.torch.capture import Captured, capture, export
from mugraph.torch.norms import find_norms
from tests.helpers.torch_models import inputs

RMS, LAYER = OpKind.RMS_NORM, OpKind.LAYER_NORM
PIECES = {OpKind.SQUARE, OpKind.SQRT, OpKind.REDUCTION, OpKind.MUL_SCALAR, OpKind.DIV}


def llama(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(dtype)


def weight_in_float32(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The weight multiplied in float32 before the cast back (as some Llama ports write it)."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (w.to(torch.float32) * h).to(dtype)


def mean_square_too(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The norm and its mean square, one node read twice."""
    ms = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(ms + 1e-6), ms


def written_ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    d = x - x.mean(-1, keepdim=True)
    return w * (d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5)) + b


def _ln_module(affine: bool) -> nn.Module:
    return nn.LayerNorm(64, eps=1e-5, elementwise_affine=affine).half().eval()


# name: (function, shapes, (op kind, eps, weight multiplied, bias added))
NORMS: dict[str, tuple[Callable[..., Any], tuple[tuple[int, ...], ...], tuple[OpKind, float, bool, bool]]] = {
    "F.rms_norm": (lambda x, w: F.rms_norm(x, (64,), w, 1e-6), ((8, 64), (64,)), (RMS, 1e-6, True, False)),
    "F.rms_norm eps=None": (lambda x: F.rms_norm(x, (64,)), ((8, 64),), (RMS, 2.0**-10, False, False)),
    "nn.RMSNorm 3-d": (nn.RMSNorm(64, eps=1e-5).half().eval(), ((2, 4, 64),), (RMS, 1e-5, True, False)),
    "pow mean rsqrt": (
        lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        ((8, 64), (64,)),
        (RMS, 1e-6, True, False),
    ),
    "x*x sum/n div sqrt": (
        lambda x: x / torch.sqrt((x * x).sum(-1, keepdim=True) / 64 + 1e-5),
        ((8, 64),),
        (RMS, 1e-5, False, False),
    ),
    "square mean 1/sqrt, weight first": (
        lambda x, w: w * (x * (1 / torch.sqrt(torch.square(x).mean(dim=1, keepdim=True) + 1e-6))),
        ((8, 64), (64,)),
        (RMS, 1e-6, True, False),
    ),
    "no eps": (lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)), ((8, 64),), (RMS, 0.0, False, False)),
    "llama casts": (llama, ((2, 4, 64), (64,)), (RMS, 1e-6, True, False)),
    "weight cast to float32 first": (weight_in_float32, ((2, 4, 64), (64,)), (RMS, 1e-6, True, False)),
    "nn.LayerNorm": (_ln_module(True), ((8, 64),), (LAYER, 1e-5, True, True)),
    "nn.LayerNorm no affine": (_ln_module(False), ((2, 4, 64),), (LAYER, 1e-5, False, False)),
    "F.layer_norm weight only": (
        lambda x, w: F.layer_norm(x, (64,), w, None, 1e-3),
        ((8, 64), (64,)),
        (LAYER, 1e-3, True, False),
    ),
    "written var": (
        lambda x: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5),
        ((8, 64),),
        (LAYER, 1e-5, False, False),
    ),
    "written centred square": (written_ln, ((8, 64), (64,), (64,)), (LAYER, 1e-5, True, True)),
}


def program_kinds(c: Captured) -> list[OpKind]:
    return [op.kind for op in c.lowering.graph.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)]


@pytest.mark.parametrize("name", list(NORMS))
def test_each_spelling_is_one_norm_op(name: str) -> None:
    fn, shapes, (kind, eps, weight, bias) = NORMS[name]
    args = inputs(*shapes)
    c = capture(fn, args)
    want = [kind] + [OpKind.MUL] * weight + [OpKind.ADD] * bias
    assert program_kinds(c) == want, c.lowering.describe()
    (op,) = c.lowering.graph.ops_of(kind)
    got = op.float_attr("eps") if any(k == "eps" for k, _ in op.attrs) else 0.0
    assert got == pytest.approx(eps, rel=1e-9, abs=0.0)
    assert c.lowering.glue == ()  # the casts, the pieces: all part of the op


def test_the_readme_rms_norm_module_is_the_builtin_programs_shape() -> None:
    """`F.rms_norm(x, (d,), eps=1e-6) @ w`: the search's own rms_norm then a matmul, in one fragment (on
    main it was six ops and two fragments, the norm cut between them)."""
    x, w = inputs((16, 64), (64, 96))
    c = capture(lambda x, w: F.rms_norm(x, (64,), eps=1e-6) @ w, (x, w))
    assert program_kinds(c) == [RMS, OpKind.MATMUL]
    parts = split_program(c.lowering.graph).parts
    assert [[c.lowering.graph.ops[i].kind for i in p.op_indices] for p in parts] == [[RMS, OpKind.MATMUL]]


def test_a_norm_is_never_cut_by_the_fragment_split() -> None:
    """A norm inside a longer chain: its op lies in one fragment, and no piece of it is left outside."""
    fn = lambda x, w, v: F.silu(llama(x, w) @ v) @ v.t() + x  # noqa: E731
    c = capture(fn, inputs((16, 64), (64,), (64, 64)))
    assert not PIECES & set(program_kinds(c))
    (norm,) = [i for i, op in enumerate(c.lowering.graph.ops) if op.kind is RMS]
    holding = [p for p in split_program(c.lowering.graph).parts if norm in p.op_indices]
    assert len(holding) == 1


@pytest.mark.parametrize(
    "fn, why",
    [
        (lambda x: x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6), "over the first dim"),
        (lambda x: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) / 32 + 1e-6), "divided by the wrong count"),
        (lambda x: mean_square_too(x), "a piece read elsewhere"),
    ],
    ids=["dim-0", "sum-over-32", "piece-read"],
)
def test_what_is_not_a_whole_norm_is_lowered_piece_by_piece(fn: Callable[..., Any], why: str) -> None:
    c = capture(fn, inputs((8, 64)))
    kinds = set(program_kinds(c))
    assert RMS not in kinds and {OpKind.SQUARE, OpKind.REDUCTION, OpKind.SQRT} <= kinds, why


def test_a_full_size_factor_is_not_the_norms_weight() -> None:
    """norm(x) * y with y [8, 64]: an rms_norm without weight, then an ordinary mul."""
    fn = lambda x, y: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * y  # noqa: E731
    ep = export(fn, inputs((8, 64), (8, 64)))
    (norm,) = find_norms(list(ep.graph.nodes)).values()
    assert norm.weight is None and norm.kind == "rms_norm"
    assert program_kinds(capture(fn, inputs((8, 64), (8, 64)))) == [RMS, OpKind.MUL]


def test_a_float32_result_of_a_half_input_keeps_its_cast_in_torch() -> None:
    """x.float() normalised and not cast back: a float32 norm, which an fp16 program does not hold (the
    float32 island stays glue); the cast is not swallowed."""
    fn = lambda x: (lambda h: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))(x.float()) @ x.t().float()  # noqa: E731
    ep = export(fn, inputs((8, 64)))
    (norm,) = find_norms(list(ep.graph.nodes)).values()
    assert norm.x.meta["val"].dtype == torch.float32 and norm.x.target is torch.ops.aten._to_copy.default


def gemma_written(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Gemma's RMSNorm without its casts: the output times (1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + w)


@pytest.mark.parametrize("shape", [(8, 64), (2, 4, 64)])
@pytest.mark.parametrize("which", ["GemmaRMSNorm", "written"])
def test_gemmas_norm_times_one_plus_w_is_one_norm_with_its_weight_shifted(shape: tuple[int, ...], which: str) -> None:
    """Hugging Face's GemmaRMSNorm (x to float32, normalised, times 1 + w, back with type_as): one
    rms_norm times an input torch makes as w + 1; the program and the module compute the model's values."""
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    from mugraph.codegen import FP16_TOLERANCE
    from mugraph.torch.runtime import OptimizedModule
    from tests.helpers.torch_float64 import only_output
    from tests.helpers.torch_models import rel_err

    torch.manual_seed(0)
    if which == "GemmaRMSNorm":
        norm = GemmaRMSNorm(64, eps=1e-6)
        with torch.no_grad():
            norm.weight.normal_()  # Gemma initialises w to 0: 1 + w would hide a missing shift
        model: Any = norm.half().eval()
        args = inputs(shape)
    else:
        model, args = gemma_written, inputs(shape, (64,))
    c = capture(model, args)
    assert program_kinds(c) == [RMS, OpKind.MUL] and not c.lowering.glue, c.lowering.describe()
    (shifted,) = [s for s in c.lowering.inputs.values() if s.shift]
    assert shifted.shift == 1.0 and shifted.kind == "reshape" and shifted.shape == (1, 64)
    wide = copy.deepcopy(model).double() if isinstance(model, nn.Module) else model  # the captured weights stay fp16
    want = wide(*(a.double() for a in args))
    # GemmaRMSNorm in float64 still normalises in float32 (its x.float()): 1e-6 is float32's rounding
    assert rel_err(only_output(c, args), want) <= (1e-6 if which == "GemmaRMSNorm" else 1e-9)
    assert rel_err(OptimizedModule(c, c.lowering.graph)(*args), want) <= FP16_TOLERANCE
