"""What each computing op means in an algebra, at kernel and block level alike: the predefined ops
(`apply_common`) and an accumulator's per-iteration part and final value."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import assert_never

from mugraph.ir.families import PREDEFINED
from mugraph.ir.graph import Op, eps_of
from mugraph.ir.types import AccumKind, OpKind
from mugraph.stages.verify.algebra import Algebra, Array


def _reduce_last(alg: Algebra, x: Array) -> Array:
    return alg.sum(x, -1)


def _rms(alg: Algebra, sum_sq: Array, n: int, eps: float = 0.0) -> Array:
    """sqrt(sum_sq / n + eps). eps is exact in every algebra: a float is a dyadic rational (in Z_pq
    it is n·d⁻¹), and eps = 0 adds nothing, so such graphs compute exactly what they did before."""
    mean = alg.scale(sum_sq, Fraction(1, n))
    return alg.sqrt(alg.shift(mean, Fraction(eps)) if eps else mean)


def _layer_norm(alg: Algebra, x: Array, eps: float) -> Array:
    """(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) over the last axis."""
    n = x.shape[-1]
    centred = alg.add(x, alg.scale(_reduce_last(alg, x), Fraction(-1, n)))
    return alg.div(centred, _rms(alg, _reduce_last(alg, alg.mul(centred, centred)), n, eps))


def _concat(alg: Algebra, a: Array, b: Array, axis: int) -> Array:
    """Concatenate along a (negative) axis, broadcasting every other axis first."""
    xp = alg.xp
    ash, bsh = list(a.shape), list(b.shape)
    if len(ash) != len(bsh):  # block arrays always share rank; kernel arrays too
        raise AssertionError("concat of arrays of different rank")
    full = [max(x, y) for x, y in zip(ash, bsh, strict=True)]
    full_a, full_b = list(full), list(full)
    full_a[axis], full_b[axis] = ash[axis], bsh[axis]
    return xp.concatenate([xp.broadcast_to(a, full_a), xp.broadcast_to(b, full_b)], axis=axis)


def apply_common(alg: Algebra, op: Op, args: Sequence[Array], rank: int) -> Array:
    """A computing op at either level. `rank` is the tensor rank; axes are counted from the end so
    leading grid axes are transparent."""
    k = op.kind
    if k not in PREDEFINED:
        raise NotImplementedError(
            f"{k} is not applied here: the walks handle inputs, outputs, graph-defined ops and accumulators"
        )
    match k:
        case OpKind.MATMUL:
            return alg.matmul(args[0], args[1])
        case OpKind.ADD:
            return alg.add(args[0], args[1])
        case OpKind.MUL:
            return alg.mul(args[0], args[1])
        case OpKind.DIV:
            return alg.div(args[0], args[1])
        case OpKind.EXP:
            return alg.exp(args[0])
        case OpKind.SQUARE:
            return alg.mul(args[0], args[0])
        case OpKind.SQRT:
            return alg.sqrt(args[0])
        case OpKind.SILU:
            return alg.silu(args[0])
        case OpKind.GELU:
            return alg.gelu(args[0])
        case OpKind.GELU_ERF:
            return alg.gelu_erf(args[0])
        case OpKind.RELU:
            return alg.relu(args[0])
        case OpKind.CLAMP:
            return alg.clamp(args[0], op.float_attr("lo"), op.float_attr("hi"))
        case OpKind.MUL_SCALAR:
            return alg.scale(args[0], Fraction(op.float_attr("scalar")))
        case OpKind.REDUCTION:
            return alg.sum(args[0], op.int_attr("dim") - rank)
        case OpKind.RMS_NORM:
            x = args[0]
            return alg.div(x, _rms(alg, _reduce_last(alg, alg.mul(x, x)), x.shape[-1], eps_of(op)))
        case OpKind.LAYER_NORM:
            return _layer_norm(alg, args[0], eps_of(op))
        case OpKind.CONCAT:
            return _concat(alg, args[0], args[1], op.int_attr("dim") - rank)
        case _ as unreachable:
            assert_never(unreachable)


def accum_part(alg: Algebra, kind: AccumKind, x: Array, rdx: int) -> Array:
    """One iteration's contribution to an accumulator."""
    match kind:
        case OpKind.ACCUM_NO_RED:
            return x
        case OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN:
            return _reduce_last(alg, x)
        case OpKind.ACCUM_RMS:
            return _reduce_last(alg, alg.mul(x, x))
        case OpKind.ACCUM_REDTOX:
            n = x.shape[-1]
            folded = x.reshape(tuple(x.shape[:-1]) + (n // rdx, rdx))
            return alg.sum(folded, -2).reshape(tuple(x.shape[:-1]) + (rdx,))
        case _ as unreachable:
            assert_never(unreachable)


def accum_final(
    alg: Algebra, kind: AccumKind, total: Array, x_shape: Sequence[int], forloop: int, eps: float = 0.0
) -> Array:
    """An accumulator's output from its total over the iterations."""
    match kind:
        case OpKind.ACCUM_NO_RED | OpKind.ACCUM_SUM | OpKind.ACCUM_REDTOX:
            return total
        case OpKind.ACCUM_MEAN:
            return alg.scale(total, Fraction(1, forloop * x_shape[-1]))
        case OpKind.ACCUM_RMS:
            return _rms(alg, total, forloop * x_shape[-1], eps)
        case _ as unreachable:
            assert_never(unreachable)
