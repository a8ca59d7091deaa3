"""The normalisations torch users write, found in an exported graph so that each lowers to one IR op.

RMSNorm as `F.rms_norm` / `nn.RMSNorm`, or written out (`x * rsqrt(x.pow(2).mean(-1, keepdim=True) +
eps)` and its spellings: x*x or square, sum/n, 1/sqrt or a division, the weight on either side), with
or without the casts that set its accumulation precision (Hugging Face's LlamaRMSNorm: x to float32,
normalise, back to the input's dtype, times the weight). LayerNorm as `F.layer_norm` / `nn.LayerNorm`,
`native_layer_norm`, or written out ((x - mean) / sqrt(var + eps), times a weight plus a bias).

The IR's `rms_norm(x, eps)` and `layer_norm(x, eps)` compute in float32 whatever the dtype, so a cast
to float32 around the norm is part of the op; the weight and bias stay a broadcast mul and add.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
from torch import fx

from mugraph.torch.composite import Composite
from mugraph.torch.lower_operands import bind, meta
from mugraph.torch.patterns import (
    Capture,
    Cast,
    Match,
    Num,
    Pattern,
    call,
    commuted,
    either,
    find,
)

aten = torch.ops.aten

NormKind = Literal["rms_norm", "layer_norm"]


def _last_dim(node: fx.Node) -> bool:
    """A reduction over the last dim only, keeping it, in the input's dtype (var: population variance)."""
    b = bind(node)
    src = b.get("self")
    x = meta(src) if isinstance(src, fx.Node) else None
    if not isinstance(x, torch.Tensor) or not b.get("keepdim", False) or b.get("dtype") is not None:
        return False
    dims = b.get("dim")
    dims = [dims] if isinstance(dims, int) else dims
    if not isinstance(dims, list | tuple) or len(dims) != 1 or not isinstance(dims[0], int):
        return False
    if dims[0] % x.dim() != x.dim() - 1:
        return False
    if node.target is aten.var.dim:
        return b.get("unbiased") is False
    if node.target is aten.var.correction:
        return b.get("correction") in (0, 0.0)
    return True


def _square(t: Pattern) -> Pattern:
    return either(call(aten.pow.Tensor_Scalar, t, Num(2.0)), call(aten.mul.Tensor, t, t), call(aten.square.default, t))


def _mean(t: Pattern) -> Pattern:
    """mean over the last dim, or a sum divided by n (or times 1/n): n checked when accepted."""
    total = call(aten.sum.dim_IntList, t, where=_last_dim)
    return either(
        call(aten.mean.dim, t, where=_last_dim),
        call(aten.div.Tensor, total, Capture("n", Num())),
        commuted(aten.mul.Tensor, total, Capture("inv_n", Num())),
    )


def _plus_eps(v: Pattern) -> Pattern:
    one = Num(1.0)
    return either(
        commuted(aten.add.Tensor, v, Capture("eps", Num()), alpha=one),
        call(aten.add.Scalar, v, Capture("eps", Num()), alpha=one),
        v,
    )


def _normed(num: Pattern, v: Pattern) -> Pattern:
    """num / sqrt(v): times rsqrt, reciprocal of sqrt, pow -0.5, or divided by sqrt."""
    root = call(aten.sqrt.default, v)
    inverse = either(
        call(aten.rsqrt.default, v),
        call(aten.reciprocal.default, root),
        commuted(aten.mul.Tensor, call(aten.reciprocal.default, root), Num(1.0)),
        call(aten.pow.Tensor_Scalar, v, Num(-0.5)),
    )
    return either(commuted(aten.mul.Tensor, num, inverse), call(aten.div.Tensor, num, root))


def _affine(core: Pattern) -> Pattern:
    """core, times a weight and plus a bias where present, each step possibly cast (the weight too:
    `(w.float() * h).to(dtype)` multiplies in float32 before the cast back, as Gemma's 1 + w does)."""
    c = Cast(core)
    one = Num(1.0)
    plus_one = commuted(aten.add.Tensor, Cast(Capture("weight")), Capture("weight_shift", Num(1.0)), alpha=one)
    scaled = Cast(commuted(aten.mul.Tensor, c, either(plus_one, Cast(Capture("weight")))))
    return Cast(
        either(
            commuted(aten.add.Tensor, scaled, Capture("bias"), alpha=one),
            scaled,
            commuted(aten.add.Tensor, c, Capture("bias"), alpha=one),
            c,
        )
    )


X = Cast(Capture("x"))

RMS_WRITTEN = _affine(_normed(X, _plus_eps(_mean(_square(X)))))
RMS_NATIVE = _affine(call(aten.rms_norm.default, X, Capture("shape"), Capture("native_weight"), Capture("native_eps")))

_CENTRED = Capture("centred", call(aten.sub.Tensor, X, _mean(X), alpha=Num(1.0)))
_VARIANCE = either(call((aten.var.dim, aten.var.correction), X, where=_last_dim), _mean(_square(_CENTRED)))
LAYER_WRITTEN = _affine(_normed(_CENTRED, _plus_eps(_VARIANCE)))
_LAYER_ARGS = (X, Capture("shape"), Capture("native_weight"), Capture("native_bias"), Capture("native_eps"))
LAYER_NATIVE = _affine(
    either(
        call(aten.layer_norm.default, *_LAYER_ARGS),
        call(operator.getitem, call(aten.native_layer_norm.default, *_LAYER_ARGS), Num(0.0)),
    )
)


def _operand(m: Match, names: Sequence[str], d: int, dtype: torch.dtype) -> fx.Node | Literal[False] | None:
    """The weight (or bias) a match captured under one of `names`: None where absent, False where it
    is not a [d] vector (leading 1-dims allowed) of the norm's dtype, or is one of the pattern's nodes."""
    found = [m.get(n) for n in names if m.get(n) is not None]
    if len(found) > 1:
        return False  # both an op's own weight and a mul after it: not one affine norm
    if not found:
        return None
    w = found[0]
    val = meta(w) if isinstance(w, fx.Node) else None
    if not isinstance(val, torch.Tensor) or w in m.nodes or val.dtype != dtype:
        return False
    shape = tuple(val.shape)
    if not shape or shape[-1] != d or any(s != 1 for s in shape[:-1]):
        return False
    assert isinstance(w, fx.Node)
    return w


def _accept(kind: NormKind, native: bool) -> Callable[[fx.Node, Match], Composite | None]:
    def accept(root: fx.Node, m: Match) -> Composite | None:
        x, out = m.get("x"), meta(root)
        xv = meta(x) if isinstance(x, fx.Node) else None
        if not (isinstance(xv, torch.Tensor) and isinstance(out, torch.Tensor)) or x in m.nodes:
            return None
        if xv.dtype != out.dtype or tuple(xv.shape) != tuple(out.shape) or xv.dim() < 1:
            return None  # a float32 result of a float16 x: the cast stays in torch (glue)
        d = int(xv.shape[-1])
        if m.has("n") and float(m.get("n")) != d:
            return None
        if m.has("inv_n") and not math.isclose(float(m.get("inv_n")) * d, 1.0, rel_tol=1e-6):
            return None
        eps = _eps(m, native)
        if eps is None or (native and list(m.get("shape") or ()) != [d]):
            return None
        weight = _operand(m, ("native_weight", "weight"), d, out.dtype)
        bias = _operand(m, ("native_bias", "bias"), d, out.dtype)
        if weight is False or bias is False:
            return None
        shift = 1.0 if m.has("weight_shift") and weight is not None else 0.0
        return Composite(kind, root, x, eps, weight, bias, frozenset(n.name for n in m.nodes), shift)

    return accept


def _eps(m: Match, native: bool) -> float | None:
    raw: Any = m.get("native_eps") if native else m.get("eps", 0.0)
    if native and raw is None:  # F.rms_norm's default: the machine epsilon of the dtype it computes in
        node = next(n for n in m.nodes if n.target is aten.rms_norm.default)
        raw = torch.finfo(meta(node).dtype).eps  # the output's dtype is the input's
    if not isinstance(raw, int | float) or isinstance(raw, bool) or not math.isfinite(raw) or raw < 0:
        return None
    return float(raw)


# LayerNorm first: a written one is also the RMSNorm of its centred values, which covers less of it.
RULES: tuple[tuple[Pattern, Callable[[fx.Node, Match], Composite | None]], ...] = (
    (LAYER_NATIVE, _accept("layer_norm", True)),
    (LAYER_WRITTEN, _accept("layer_norm", False)),
    (RMS_NATIVE, _accept("rms_norm", True)),
    (RMS_WRITTEN, _accept("rms_norm", False)),
)


def find_norms(nodes: Sequence[fx.Node]) -> dict[str, Composite]:
    """Every normalisation in `nodes` whose pieces nothing else reads, by its root node's name."""
    return {norm.root.name: norm for norm, _ in find(nodes, RULES)}
