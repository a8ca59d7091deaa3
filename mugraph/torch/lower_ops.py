"""The ATen ops the IR has, each lowered to its ops (see `lower` for the semantics kept): a handler
returns the op's program value, or raises `Skip` to leave the node to PyTorch as glue."""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from collections.abc import Callable, Sequence
from math import prod
from typing import Any, assert_never, cast

import torch
from torch import fx

from mugraph.ir.graph import Tensor
from mugraph.ir.types import DType, OpKind
from mugraph.torch.composite import Composite
from mugraph.torch.flatten import TRANSPOSES, VIEWS
from mugraph.torch.lower_matmul import MatmulLowering
from mugraph.torch.lower_operands import (
    DTYPES,
    Frame,
    InputSource,
    Recip,
    Skip,
    Value,
    bind,
    flat_shape,
    meta,
    need,
    scalar,
)

aten = torch.ops.aten


# The input kinds a scale folds into, and the kind each becomes: a value or a scaled value times s, a
# reshaped one (a norm's weight [D] as [1, D]) reshaped then times s, a linear layer's transposed weight
# (LoRA's B) as a scaled row-major copy (no larger than the product, by `_fold_into_weight`'s rule).
SCALABLE = {"value": "scale", "scale": "scale", "reshape": "reshape_scale", "transpose": "transpose_scale"}


class OpLowering(MatmulLowering):
    """The handlers, by ATen op."""

    def __init__(self, ep: torch.export.ExportedProgram) -> None:
        super().__init__(ep)
        self.handlers: dict[Any, Callable[[fx.Node], Value]] = {
            aten.linear.default: self.linear,
            aten.matmul.default: self.matmul,
            aten.mm.default: self.matmul,
            aten.bmm.default: self.matmul,
            aten.einsum.default: self.einsum,
            aten.addmm.default: self.addmm,
            aten.baddbmm.default: self.baddbmm,
            aten.add.Tensor: self.add,
            aten.add.Scalar: self.add,
            aten.sub.Tensor: self.sub,
            aten.sub.Scalar: self.sub,
            aten.rsub.Scalar: self.rsub,
            aten.mul.Tensor: self.mul,
            aten.mul.Scalar: self.mul,
            aten.div.Tensor: self.div,
            aten.div.Scalar: self.div,
            aten.neg.default: self.neg,
            aten.exp.default: self.unary(OpKind.EXP),
            aten.silu.default: self.unary(OpKind.SILU),
            aten.relu.default: self.unary(OpKind.RELU),
            aten.sqrt.default: self.unary(OpKind.SQRT),
            aten.square.default: self.unary(OpKind.SQUARE),
            aten.rsqrt.default: self.rsqrt,
            aten.reciprocal.default: self.reciprocal,
            aten.gelu.default: self.gelu,
            aten.pow.Tensor_Scalar: self.pow,
            aten.sum.dim_IntList: self.sum,
            aten.mean.dim: self.mean,
            aten.cat.default: self.cat,
            aten.clamp.default: self.clamp,
            aten.clone.default: self.clone,
            operator.getitem: self.piece,
            **dict.fromkeys(TRANSPOSES, self.transpose),
            **dict.fromkeys(VIEWS, self.view),
        }

    def _binary(self, node: fx.Node, kind: OpKind, a: Any, b: Any) -> Value:
        dt = self.out_dtype(node)
        f = self.frame(node, [a, b])
        ta, tb = self.operand(a, dt, f), self.operand(b, dt, f)
        return {OpKind.ADD: self.g.add, OpKind.MUL: self.g.mul, OpKind.DIV: self.g.div}[kind](ta, tb)

    def _scaled(self, node: fx.Node, f: Frame, a: Any, alpha: Any) -> Any:
        """`a` times alpha (a program tensor, or a scalar)."""
        s = scalar(alpha)
        if s is None:
            raise Skip
        if s == 1.0:
            return a
        if not isinstance(a, fx.Node):
            return need(a) * s
        dt = self.out_dtype(node)
        return self._times(self.operand(a, dt, f), s, dt)

    def _times(self, t: Tensor, s: float, dt: DType) -> Tensor:
        """t times a constant the fold into a weight could not take (a product with another reader, a
        negation, a mean's 1/n): a mul by a constant input [1, ..., 1] of the program's dtype, which
        the search can build (it has no scalar op: with mul_scalar, CLIP's linear + bias then times
        1.702 held no μGraph, and the linear was not fused). Times 1.0 (Llama's rotary scaling) stays
        mul_scalar, whose term is its operand's: the search finds its input itself, no kernel."""
        if s == 1.0:
            return self.g.mul_scalar(t, s)
        return self.g.mul(t, self.const(s, dt, len(t.shape)))

    def _add_values(self, node: fx.Node, f: Frame, a: Any, b: Any) -> Value:
        """a + b where either may already be a program tensor."""
        dt = self.out_dtype(node)

        def operand(x: Any) -> Tensor:
            return x if isinstance(x, Tensor) else self.operand(x, dt, f)

        if not isinstance(a, fx.Node | Tensor) and not isinstance(b, fx.Node | Tensor):
            raise Skip
        return self.g.add(operand(a), operand(b))

    def _sum(self, node: fx.Node, a: Any, b: Any, alpha: Any) -> Value:
        """a + alpha · b."""
        f = self.frame(node, [a, b])
        return self._add_values(node, f, a, self._scaled(node, f, b, alpha))

    def add(self, node: fx.Node) -> Value:
        b = bind(node)
        return self._sum(node, b["self"], b["other"], b.get("alpha", 1))

    def sub(self, node: fx.Node) -> Value:
        b = bind(node)
        alpha = scalar(b.get("alpha", 1))
        if alpha is None:
            raise Skip
        return self._sum(node, b["self"], b["other"], -alpha)

    def rsub(self, node: fx.Node) -> Value:  # other - alpha * self
        b = bind(node)
        alpha = scalar(b.get("alpha", 1))
        if alpha is None:
            raise Skip
        return self._sum(node, b["other"], b["self"], -alpha)

    def _scale(self, x: Any, s: float, dt: DType) -> Value | None:
        """(A @ B) * s as (A * s) @ B where A is a torch value and the product has no other reader: the
        scale runs in torch (as attention's 1/sqrt(d) is folded into Q), so the search sees a plain
        matmul (it has no scalar op to build one from)."""
        if not (isinstance(x, fx.Node) and x.name in self.values and len(x.users) == 1) or self.is_flat(x):
            return None
        if x.target not in (aten.matmul.default, aten.mm.default, aten.bmm.default):
            return None
        a, b = x.args[0], x.args[1]
        if not isinstance(a, fx.Node) or a.name in self.values or self._dtype(a) is not dt:
            return None
        src = InputSource("scale", a.name, self._shape(a), dt, s)
        name = self._made(src) or self._fresh(f"{a.name}_s")
        return self.g.matmul(self._new_input(name, src, a.name not in self.late), self.tensor(b, dt))

    def _fold_into_weight(self, node: fx.Node, x: Any, s: float, dt: DType) -> Value | None:
        """(a · w) * s or (a @ w) * s as a · (w * s) or a @ (w * s), where w is a program input that
        PyTorch holds (a parameter, as it is or reshaped) no larger than the product, and the product
        has no other reader: the scale runs in torch on w, as `_scale` runs attention's on Q, and the
        search sees the product alone (it has no scalar op to build one from). An RMSNorm's output times
        a constant, or a LoRA update times alpha/r, is then searched as the product it scales."""
        if not (isinstance(x, fx.Node) and len(x.users) == 1 and isinstance(self.values.get(x.name), Tensor)):
            return None
        if self.is_flat(x) and node.name not in self.flat_ok:  # the product's 2-d form, where node needs dims
            return None
        made = cast(Tensor, self.values[x.name]).index
        op = next((o for o in reversed(self.g.ops) if made in o.outputs), None)
        if op is None or op.kind not in (OpKind.MUL, OpKind.MATMUL) or any(made in o.inputs for o in self.g.ops):
            return None
        by_tensor = {t.index: n for n, t in self.input_tensor.items()}
        size = prod(self.g.tensors[made].shape)
        best: tuple[int, int, str] | None = None  # (size, operand position, input name)
        for k, t in enumerate(op.inputs):
            name = by_tensor.get(t)
            src = self.inputs.get(name) if name is not None else None
            if name is None or src is None or src.kind not in SCALABLE or src.dtype is not dt:
                continue
            n = prod(src.shape)
            if n <= size and (best is None or n < best[0]):
                best = (n, k, name)
        if best is None:
            return None
        _, k, name = best
        src = self.inputs[name]
        factor = (src.value if src.kind == "scale" else 1.0) * s
        scaled = InputSource(SCALABLE[src.kind], src.node, src.shape, dt, factor, src.shift)
        new = self._made(scaled) or self._fresh(f"{name}_s")
        w = self._new_input(new, scaled, name in self.early_inputs)
        self.folded[x.name] = node.name  # x's product is node's now: a split piece stays read through it
        args = [w if j == k else self.g.tensors[t] for j, t in enumerate(op.inputs)]
        return self.g.mul(*args) if op.kind is OpKind.MUL else self.g.matmul(*args)

    def mul(self, node: fx.Node) -> Value:
        a, b = node.args[0], node.args[1]
        dt = self.out_dtype(node)
        f = self.frame(node, [a, b])
        for x, y in ((a, b), (b, a)):  # x * (1/t) is x / t
            if isinstance(y, fx.Node) and isinstance(self.values.get(y.name), Recip):
                recip = self.values[y.name]
                assert isinstance(recip, Recip)
                if len(recip.t.shape) == f.rank:
                    return self.g.div(self.operand(x, dt, f), recip.t)
        for x, y in ((a, b), (b, a)):
            s = scalar(y)
            if s is not None and isinstance(x, fx.Node):
                return (
                    self._scale(x, s, dt)
                    or self._fold_into_weight(node, x, s, dt)
                    or self._times(self.operand(x, dt, f), s, dt)
                )
        return self._binary(node, OpKind.MUL, a, b)

    def div(self, node: fx.Node) -> Value:
        b = bind(node)
        if b.get("rounding_mode") is not None:
            raise Skip
        a, d = b["self"], b["other"]
        s = scalar(d)
        if s is not None and isinstance(a, fx.Node):
            if s == 0.0:
                raise Skip
            dt = self.out_dtype(node)
            f = self.frame(node, [a])
            return (
                self._scale(a, 1.0 / s, dt)
                or self._fold_into_weight(node, a, 1.0 / s, dt)
                or self._times(self.operand(a, dt, f), 1.0 / s, dt)
            )
        return self._binary(node, OpKind.DIV, a, d)

    def _only(self, node: fx.Node, a: Any) -> Tensor:
        """The one tensor operand of an element-wise op (on its 2-d form where it has one)."""
        if not isinstance(a, fx.Node):
            raise Skip
        return self.operand(a, self.out_dtype(node), self.frame(node, [a]))

    def neg(self, node: fx.Node) -> Value:
        x = self._only(node, node.args[0])
        return self._times(x, -1.0, x.dtype)

    def clone(self, node: fx.Node) -> Value:
        """A copy (what dropout is in eval mode) of a lowered value is that value."""
        b = bind(node)
        x = b["self"]
        if not isinstance(x, fx.Node) or x.name not in self.values or b.get("memory_format") is not None:
            raise Skip
        self.out_dtype(node)
        return self.values[x.name]

    def view(self, node: fx.Node) -> Value:
        """A view of a lowered value that keeps its 2-d form (GPT-2's Conv1D flattens x to [B·S, D]
        around its addmm and back) is that value: the same shape, or held on the 2-d form of a view
        of 3 or more dims. Any other view is glue."""
        x = node.args[0]
        if not isinstance(x, fx.Node) or x.name not in self.values:
            raise Skip
        out = self._shape(node)
        t = self.values[x.name] = self.materialize(self.values[x.name])
        if t.dtype is not self.out_dtype(node):
            raise Skip
        if t.shape == out or (node.name in self.flat_ok and t.shape == (prod(out[:-1]), out[-1])):
            return t
        raise Skip

    def unary(self, kind: OpKind) -> Callable[[fx.Node], Value]:
        def lower(node: fx.Node) -> Value:
            x = self._only(node, node.args[0])
            return {
                OpKind.EXP: self.g.exp,
                OpKind.SILU: self.g.silu,
                OpKind.RELU: self.g.relu,
                OpKind.SQRT: self.g.sqrt,
                OpKind.SQUARE: self.g.square,
            }[kind](x)

        return lower

    def rsqrt(self, node: fx.Node) -> Value:
        return Recip(self.g.sqrt(self._only(node, node.args[0])))

    def reciprocal(self, node: fx.Node) -> Value:
        return Recip(self._only(node, node.args[0]))

    def gelu(self, node: fx.Node) -> Value:
        x = self._only(node, node.args[0])
        form = bind(node).get("approximate", "none")
        if form == "tanh":
            return self.g.gelu(x)
        if form != "none":
            raise Skip
        return self.g.gelu_erf(x)

    def pow(self, node: fx.Node) -> Value:
        e = scalar(node.args[1])
        x = self._only(node, node.args[0])
        if e == 2.0:
            return self.g.square(x)
        if e == 0.5:
            return self.g.sqrt(x)
        if e == 1.0:
            return x
        if e == -1.0:
            return Recip(x)
        if e == -0.5:
            return Recip(self.g.sqrt(x))
        if e in (3.0, 4.0):  # x³ (GELU written out, polynomial features) and x⁴ as products of squares
            sq = self.g.square(x)
            return self.g.mul(sq, x) if e == 3.0 else self.g.square(sq)
        raise Skip

    def _dims(self, node: fx.Node, dims: Any, rank: int) -> list[int]:
        if dims is None or dims == []:
            return list(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        return sorted({int(d) % rank for d in dims})

    def _reduce(self, node: fx.Node, mean: bool) -> Value:
        b = bind(node)
        if b.get("dtype") is not None or not b.get("keepdim", False):
            raise Skip  # a reduction that drops its dims: a reshape the IR has not
        rank = len(self._shape(node))
        dims = self._dims(node, b.get("dim"), rank)
        f = self.frame(node, [b["self"]], rowwise=dims == [rank - 1])  # over the last dim: row by row
        x = self.operand(b["self"], self.out_dtype(node), f)
        if f.flat:
            dims = [1]
        count = 1
        for d in dims:
            count *= x.shape[d]
            x = self.g.reduction(x, d)
        return self._times(x, 1.0 / count, x.dtype) if mean and count > 1 else x

    def sum(self, node: fx.Node) -> Value:
        return self._reduce(node, False)

    def mean(self, node: fx.Node) -> Value:
        return self._reduce(node, True)

    def composite(self, n: Composite) -> Value:
        """One composite found in the graph: its IR op, times its weight, plus its bias (a norm's)."""
        dt = self.out_dtype(n.root)
        f = self.frame(n.root, [n.x, n.weight, n.bias])
        x = self.operand(n.x, dt, f)
        match n.kind:
            case "rms_norm":
                y = self.g.rms_norm(x, eps=n.eps)
            case "layer_norm":
                y = self.g.layer_norm(x, eps=n.eps)
            case "gelu":
                y = self.g.gelu(x)
            case "gelu_erf":
                y = self.g.gelu_erf(x)
            case "silu":
                y = self.g.silu(x)
            case _ as unreachable:
                assert_never(unreachable)
        if n.weight is not None:
            y = self.g.mul(y, self._shifted(self.operand(n.weight, dt, f), n.weight_shift))
        if n.bias is not None:
            y = self.g.add(y, self.operand(n.bias, dt, f))
        return y

    def _shifted(self, w: Tensor, shift: float) -> Tensor:
        """Program input `w` plus `shift`, computed by torch as the input is made (Gemma's 1 + w)."""
        if not shift:
            return w
        name = next((n for n, t in self.input_tensor.items() if t.index == w.index), None)
        src = self.inputs.get(name) if name is not None else None
        if name is None or src is None or src.kind not in ("value", "reshape") or src.shift:
            raise Skip  # a computed weight: the norm's pieces are lowered one by one
        shifted = dataclasses.replace(src, shift=shift)
        new = self._made(shifted) or self._fresh(f"{name}_p1")
        return self._new_input(new, shifted, name in self.early_inputs)

    def cat(self, node: fx.Node) -> Value:
        b = bind(node)
        dt = self.out_dtype(node)
        parts = list(cast(Sequence[fx.Node], b["tensors"]))
        rank = len(self._shape(node))
        dim = int(cast(int, b.get("dim", 0))) % rank
        if len(parts) < 2:
            raise Skip
        f = self.frame(node, parts, rowwise=dim == rank - 1)
        if f.flat and any(flat_shape(self._shape(p), f.out) != (prod(f.out[:-1]), self._shape(p)[-1]) for p in parts):
            f = Frame(f.out, False)  # a part broadcast over rows: cat does not broadcast
        out = self.operand(parts[0], dt, f)
        for p in parts[1:]:
            out = self.g.concat(out, self.operand(p, dt, f), 1 if f.flat else dim)
        return out

    def clamp(self, node: fx.Node) -> Value:
        b = bind(node)
        lo, hi = scalar(b.get("min")), scalar(b.get("max"))
        if lo is None or hi is None or not lo < hi:
            raise Skip
        return self.g.clamp(self._only(node, b["self"]), lo, hi)

    def _arrives(self, node: fx.Node) -> None:
        """A glue value computed from lowered ones enters the program where glue makes it, not at its first
        reader, so fragments before that reader may still hold the ops between (unread inputs are dropped)."""
        val = meta(node)
        if isinstance(val, torch.Tensor) and val.dtype in DTYPES:
            with contextlib.suppress(Skip):  # not an operand the IR takes: it stays in torch
                self.tensor(node, DTYPES[val.dtype])
