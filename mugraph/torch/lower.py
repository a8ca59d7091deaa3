"""Lowering an exported ATen graph to one mugraph program, and what PyTorch runs around it.

Every fp16 or bf16 op the IR has (below) is lowered; every other op is *glue*, run by PyTorch as
the exported graph says. A value torch computes (a user input, a parameter, a glue op's result)
enters the program as an input named after its node; a lowered value that glue or the model's
outputs read leaves it as an output named after its node. Inputs that depend only on the model's
inputs and parameters come first; an input computed by glue from lowered values is placed just
before its first reader, which the fragment split reads as "arrives later" (no fragment spans it),
so fragments and glue run in an order where every value exists when it is read.

Semantics are PyTorch's, decomposed into the IR's ops where exact: `rms_norm(x, w, eps)` is
x / sqrt(mean(x²) + eps) · w, softmax is exp(x) / sum(exp(x)) (no max subtraction: equal in exact
arithmetic), `gelu` is the erf form unless `approximate="tanh"`, division by a scalar is a scale by
its reciprocal, and a scalar added to a tensor is a constant input filled with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import fx

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.serialize import SCHEMA, from_json, to_json
from mugraph.ir.types import MAX_DIMS, DType, OpKind
from mugraph.torch.errors import CaptureError

DTYPES = {torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16}
aten = torch.ops.aten


@dataclass(frozen=True)
class InputSource:
    """How PyTorch computes one program input: an fx value as it is (`value`), its 2-d transpose
    (`transpose`: a linear layer's weight), reshaped with leading 1-dims (`reshape`: a bias), times a
    scalar (`scale`: attention's Q), or a constant (`const`: a scalar operand)."""

    kind: str
    node: str | None
    shape: tuple[int, ...]
    dtype: DType
    value: float = 0.0


@dataclass(frozen=True)
class Lowering:
    """A captured graph as a mugraph program plus what torch runs around it."""

    graph: KernelGraph
    inputs: dict[str, InputSource]  # program input name -> how torch computes it
    outputs: dict[str, str]  # fx node name -> program output name (lowered values torch reads)
    lowered: tuple[str, ...]  # fx nodes computed by the program, in graph order
    glue: tuple[str, ...]  # fx nodes PyTorch runs, in graph order

    def describe(self) -> list[str]:
        """One line per kind of node, for the run's note."""
        return [f"lowered ({len(self.lowered)}): {', '.join(self.lowered) or '-'}",
                f"glue run by PyTorch ({len(self.glue)}): {', '.join(self.glue) or '-'}"]


@dataclass(frozen=True)
class _Recip:
    """1/t, kept symbolic so that a * rsqrt(b) lowers to a / sqrt(b)."""

    t: Tensor


Value = Tensor | _Recip


class _Skip(Exception):
    """This node is glue: PyTorch runs it."""


def source_line(node: fx.Node) -> str:
    """`file:line` of the user's code that made `node` (the innermost frame torch recorded), or ''."""
    trace = str(node.meta.get("stack_trace") or "")
    lines = [ln.strip() for ln in trace.splitlines()
             if ln.strip().startswith('File "') and "<eval_with_key>" not in ln and "/torch/" not in ln]
    if not lines:
        return ""
    last = lines[-1]  # File "path", line N, in fn
    try:
        path = last.split('"')[1]
        line = last.split(", line ")[1].split(",")[0]
    except IndexError:
        return ""
    return f"{path}:{line}"


def _meta(node: fx.Node) -> Any:
    return node.meta.get("val")


def _bind(node: fx.Node) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    out: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def _scalar(a: Any) -> float | None:
    return float(a) if isinstance(a, int | float) and not isinstance(a, bool) else None


class _Lowerer:
    def __init__(self, ep: torch.export.ExportedProgram) -> None:
        self.ep = ep
        self.g = KernelGraph()
        self.nodes = [n for n in ep.graph.nodes]
        self.names = {n.name for n in self.nodes}
        self.values: dict[str, Value] = {}  # lowered fx node -> its program tensor
        self.late: set[str] = set()  # torch-computed nodes that depend on lowered values
        self.inputs: dict[str, InputSource] = {}
        self.input_tensor: dict[str, Tensor] = {}
        self.early_inputs: set[str] = set()
        self.glue: list[str] = []
        self.n_consts = 0
        self.handlers: dict[Any, Callable[[fx.Node], Value]] = {
            aten.linear.default: self.linear, aten.matmul.default: self.matmul, aten.mm.default: self.matmul,
            aten.bmm.default: self.matmul, aten.addmm.default: self.addmm,
            aten.add.Tensor: self.add, aten.add.Scalar: self.add, aten.sub.Tensor: self.sub,
            aten.sub.Scalar: self.sub, aten.rsub.Scalar: self.rsub, aten.mul.Tensor: self.mul,
            aten.mul.Scalar: self.mul, aten.div.Tensor: self.div, aten.div.Scalar: self.div,
            aten.neg.default: self.neg, aten.exp.default: self.unary(OpKind.EXP),
            aten.silu.default: self.unary(OpKind.SILU), aten.relu.default: self.unary(OpKind.RELU),
            aten.sqrt.default: self.unary(OpKind.SQRT), aten.square.default: self.unary(OpKind.SQUARE),
            aten.rsqrt.default: self.rsqrt, aten.reciprocal.default: self.reciprocal,
            aten.gelu.default: self.gelu, aten.pow.Tensor_Scalar: self.pow, aten.sum.dim_IntList: self.sum,
            aten.mean.dim: self.mean, aten.softmax.int: self.softmax, aten._softmax.default: self.softmax,
            aten.rms_norm.default: self.rms_norm, aten.cat.default: self.cat, aten.clamp.default: self.clamp,
        }

    # -- operands ---------------------------------------------------------------------------------
    def _dtype(self, node: fx.Node) -> DType:
        val = _meta(node)
        if not isinstance(val, torch.Tensor) or val.dtype not in DTYPES:
            raise _Skip
        shape = tuple(val.shape)
        if not 1 <= len(shape) <= MAX_DIMS or any(not isinstance(d, int) or d < 1 for d in shape):
            raise _Skip
        return DTYPES[val.dtype]

    def _shape(self, node: fx.Node) -> tuple[int, ...]:
        return tuple(int(d) for d in _meta(node).shape)

    def _new_input(self, name: str, src: InputSource, early: bool) -> Tensor:
        if name not in self.input_tensor:
            self.inputs[name] = src
            self.input_tensor[name] = self.g.new_input(src.shape, src.dtype, name)
            if early:
                self.early_inputs.add(name)
        return self.input_tensor[name]

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names or name in self.inputs:
            name, k = f"{base}_{k}", k + 1
        return name

    def tensor(self, a: Any, dtype: DType, rank: int | None = None) -> Tensor:
        """The program tensor of fx value `a` (lowered, or a new input for a torch value), of `dtype`
        and, where given, `rank` (a torch value of lower rank is reshaped with leading 1-dims)."""
        if not isinstance(a, fx.Node):
            raise _Skip
        if a.name in self.values:
            t = self.values[a.name] = self.materialize(self.values[a.name])  # 1/t made once
            if t.dtype is not dtype or (rank is not None and len(t.shape) != rank):
                raise _Skip
            return t
        if self._dtype(a) is not dtype:
            raise _Skip
        shape = self._shape(a)
        early = a.name not in self.late
        if rank is None or len(shape) == rank:
            return self._new_input(a.name, InputSource("value", a.name, shape, dtype), early)
        if len(shape) > rank:
            raise _Skip
        full = (1,) * (rank - len(shape)) + shape
        name = self._fresh(f"{a.name}_r{rank}")
        for n, s in self.inputs.items():  # one reshaped input per value and rank
            if s.kind == "reshape" and s.node == a.name and s.shape == full:
                return self.input_tensor[n]
        return self._new_input(name, InputSource("reshape", a.name, full, dtype), early)

    def const(self, value: float, dtype: DType, rank: int) -> Tensor:
        shape = (1,) * rank
        for n, s in self.inputs.items():
            if s.kind == "const" and s.value == value and s.dtype is dtype and s.shape == shape:
                return self.input_tensor[n]
        name = self._fresh(f"const{self.n_consts}")
        self.n_consts += 1
        return self._new_input(name, InputSource("const", None, shape, dtype, value), True)

    def materialize(self, v: Value) -> Tensor:
        if isinstance(v, _Recip):
            return self.g.div(self.const(1.0, v.t.dtype, len(v.t.shape)), v.t)
        return v

    # -- ops --------------------------------------------------------------------------------------
    def out_dtype(self, node: fx.Node) -> DType:
        return self._dtype(node)

    def linear(self, node: fx.Node) -> Value:
        b = _bind(node)
        dt = self.out_dtype(node)
        x, w = b["input"], b["weight"]
        if not isinstance(w, fx.Node) or w.name in self.values or len(self._shape(w)) != 2:
            raise _Skip
        if not isinstance(x, fx.Node) or len(self._shape(x)) != 2 or self._dtype(w) is not dt:
            raise _Skip
        xt = self.tensor(x, dt)
        name = self._fresh(f"{w.name}_t")
        for n, s in self.inputs.items():
            if s.kind == "transpose" and s.node == w.name:
                name = n
        n_out, k = self._shape(w)
        wt = self._new_input(name, InputSource("transpose", w.name, (k, n_out), dt), w.name not in self.late)
        y = self.g.matmul(xt, wt)
        if b.get("bias") is not None:
            y = self.g.add(y, self.tensor(b["bias"], dt, 2))
        return y

    def matmul(self, node: fx.Node) -> Value:
        a, b = node.args[0], node.args[1]
        dt = self.out_dtype(node)
        if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)):
            raise _Skip
        sa, sb = self._shape(a), self._shape(b)
        if len(sa) != len(sb) or len(sa) < 2 or sa[:-2] != sb[:-2]:
            raise _Skip
        return self.g.matmul(self.tensor(a, dt), self.tensor(b, dt))

    def addmm(self, node: fx.Node) -> Value:
        b = _bind(node)
        if _scalar(b.get("beta", 1)) != 1.0 or _scalar(b.get("alpha", 1)) != 1.0:
            raise _Skip
        dt = self.out_dtype(node)
        return self.g.add(self.g.matmul(self.tensor(b["mat1"], dt), self.tensor(b["mat2"], dt)),
                          self.tensor(b["self"], dt, 2))

    def _binary(self, node: fx.Node, kind: OpKind, a: Any, b: Any) -> Value:
        dt = self.out_dtype(node)
        rank = len(self._shape(node))
        ta = self.tensor(a, dt, rank) if isinstance(a, fx.Node) else self.const(_need(a), dt, rank)
        tb = self.tensor(b, dt, rank) if isinstance(b, fx.Node) else self.const(_need(b), dt, rank)
        return {OpKind.ADD: self.g.add, OpKind.MUL: self.g.mul, OpKind.DIV: self.g.div}[kind](ta, tb)

    def _scaled(self, node: fx.Node, a: Any, alpha: Any) -> Any:
        """`a` times alpha (a program tensor, or a scalar)."""
        s = _scalar(alpha)
        if s is None:
            raise _Skip
        if s == 1.0:
            return a
        if not isinstance(a, fx.Node):
            return _need(a) * s
        dt = self.out_dtype(node)
        return self.g.mul_scalar(self.tensor(a, dt, len(self._shape(node))), s)

    def _add_values(self, node: fx.Node, a: Any, b: Any) -> Value:
        """a + b where either may already be a program tensor."""
        dt = self.out_dtype(node)
        rank = len(self._shape(node))

        def operand(x: Any) -> Tensor:
            if isinstance(x, Tensor):
                return x
            return self.tensor(x, dt, rank) if isinstance(x, fx.Node) else self.const(_need(x), dt, rank)

        if not isinstance(a, fx.Node | Tensor) and not isinstance(b, fx.Node | Tensor):
            raise _Skip
        return self.g.add(operand(a), operand(b))

    def add(self, node: fx.Node) -> Value:
        b = _bind(node)
        return self._add_values(node, b["self"], self._scaled(node, b["other"], b.get("alpha", 1)))

    def sub(self, node: fx.Node) -> Value:
        b = _bind(node)
        alpha = _scalar(b.get("alpha", 1))
        if alpha is None:
            raise _Skip
        return self._add_values(node, b["self"], self._scaled(node, b["other"], -alpha))

    def rsub(self, node: fx.Node) -> Value:  # other - alpha * self
        b = _bind(node)
        alpha = _scalar(b.get("alpha", 1))
        if alpha is None:
            raise _Skip
        return self._add_values(node, b["other"], self._scaled(node, b["self"], -alpha))

    def _scale(self, x: Any, s: float, dt: DType) -> Value | None:
        """(A @ B) * s as (A * s) @ B where A is a torch value and the product has no other reader: the
        scale runs in torch (as attention's 1/sqrt(d) is folded into Q), so the search sees a plain
        matmul (it has no scalar op to build one from)."""
        if not (isinstance(x, fx.Node) and x.name in self.values and len(x.users) == 1):
            return None
        if x.target not in (aten.matmul.default, aten.mm.default, aten.bmm.default):
            return None
        a, b = x.args[0], x.args[1]
        if not isinstance(a, fx.Node) or a.name in self.values or self._dtype(a) is not dt:
            return None
        src = InputSource("scale", a.name, self._shape(a), dt, s)
        name = next((n for n, v in self.inputs.items() if v == src), None) or self._fresh(f"{a.name}_s")
        return self.g.matmul(self._new_input(name, src, a.name not in self.late), self.tensor(b, dt))

    def mul(self, node: fx.Node) -> Value:
        a, b = node.args[0], node.args[1]
        dt = self.out_dtype(node)
        rank = len(self._shape(node))
        for x, y in ((a, b), (b, a)):  # x * (1/t) is x / t
            if isinstance(y, fx.Node) and isinstance(self.values.get(y.name), _Recip):
                recip = self.values[y.name]
                assert isinstance(recip, _Recip)
                if len(recip.t.shape) == rank:
                    xt = self.tensor(x, dt, rank) if isinstance(x, fx.Node) else self.const(_need(x), dt, rank)
                    return self.g.div(xt, recip.t)
        for x, y in ((a, b), (b, a)):
            s = _scalar(y)
            if s is not None and isinstance(x, fx.Node):
                return self._scale(x, s, dt) or self.g.mul_scalar(self.tensor(x, dt, rank), s)
        return self._binary(node, OpKind.MUL, a, b)

    def div(self, node: fx.Node) -> Value:
        b = _bind(node)
        if b.get("rounding_mode") is not None:
            raise _Skip
        a, d = b["self"], b["other"]
        s = _scalar(d)
        if s is not None and isinstance(a, fx.Node):
            if s == 0.0:
                raise _Skip
            dt = self.out_dtype(node)
            return self._scale(a, 1.0 / s, dt) or self.g.mul_scalar(self.tensor(a, dt, len(self._shape(node))), 1.0 / s)
        return self._binary(node, OpKind.DIV, a, d)

    def neg(self, node: fx.Node) -> Value:
        return self.g.mul_scalar(self.tensor(node.args[0], self.out_dtype(node)), -1.0)

    def unary(self, kind: OpKind) -> Callable[[fx.Node], Value]:
        def lower(node: fx.Node) -> Value:
            x = self.tensor(node.args[0], self.out_dtype(node))
            return {OpKind.EXP: self.g.exp, OpKind.SILU: self.g.silu, OpKind.RELU: self.g.relu,
                    OpKind.SQRT: self.g.sqrt, OpKind.SQUARE: self.g.square}[kind](x)

        return lower

    def rsqrt(self, node: fx.Node) -> Value:
        return _Recip(self.g.sqrt(self.tensor(node.args[0], self.out_dtype(node))))

    def reciprocal(self, node: fx.Node) -> Value:
        return _Recip(self.tensor(node.args[0], self.out_dtype(node)))

    def gelu(self, node: fx.Node) -> Value:
        x = self.tensor(node.args[0], self.out_dtype(node))
        form = _bind(node).get("approximate", "none")
        if form == "tanh":
            return self.g.gelu(x)
        if form != "none":
            raise _Skip
        return self.g.gelu_erf(x)

    def pow(self, node: fx.Node) -> Value:
        e = _scalar(node.args[1])
        x = self.tensor(node.args[0], self.out_dtype(node))
        if e == 2.0:
            return self.g.square(x)
        if e == 0.5:
            return self.g.sqrt(x)
        if e == 1.0:
            return x
        if e == -1.0:
            return _Recip(x)
        if e == -0.5:
            return _Recip(self.g.sqrt(x))
        raise _Skip

    def _dims(self, node: fx.Node, dims: Any, rank: int) -> list[int]:
        if dims is None or dims == []:
            return list(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        return sorted({int(d) % rank for d in dims})

    def _reduce(self, node: fx.Node, mean: bool) -> Value:
        b = _bind(node)
        if b.get("dtype") is not None or not b.get("keepdim", False):
            raise _Skip  # a reduction that drops its dims: a reshape the IR has not
        x = self.tensor(b["self"], self.out_dtype(node))
        count = 1
        for d in self._dims(node, b.get("dim"), len(x.shape)):
            count *= x.shape[d]
            x = self.g.reduction(x, d)
        return self.g.mul_scalar(x, 1.0 / count) if mean and count > 1 else x

    def sum(self, node: fx.Node) -> Value:
        return self._reduce(node, False)

    def mean(self, node: fx.Node) -> Value:
        return self._reduce(node, True)

    def softmax(self, node: fx.Node) -> Value:
        dt = self.out_dtype(node)
        args = list(node.args) + [None] * 3
        if node.target is aten.softmax.int and (args[2] is not None or node.kwargs.get("dtype") is not None):
            raise _Skip
        if node.target is aten._softmax.default and args[2]:
            raise _Skip  # half_to_float: a float32 result
        x = self.tensor(args[0], dt)
        e = self.g.exp(x)
        return self.g.div(e, self.g.reduction(e, int(cast(int, args[1])) % len(x.shape)))

    def rms_norm(self, node: fx.Node) -> Value:
        b = _bind(node)
        dt = self.out_dtype(node)
        x = self.tensor(b["input"], dt)
        if list(b["normalized_shape"]) != [x.shape[-1]]:
            raise _Skip
        eps = b.get("eps")
        eps = float(torch.finfo(_meta(node).dtype).eps) if eps is None else float(eps)
        last = len(x.shape) - 1
        ms = self.g.mul_scalar(self.g.reduction(self.g.square(x), last), 1.0 / x.shape[-1])
        y = self.g.div(x, self.g.sqrt(self.g.add(ms, self.const(eps, dt, len(x.shape)))))
        if b.get("weight") is not None:
            y = self.g.mul(y, self.tensor(b["weight"], dt, len(x.shape)))
        return y

    def cat(self, node: fx.Node) -> Value:
        b = _bind(node)
        dt = self.out_dtype(node)
        parts = list(b["tensors"])
        rank = len(self._shape(node))
        if len(parts) < 2:
            raise _Skip
        out = self.tensor(parts[0], dt, rank)
        for p in parts[1:]:
            out = self.g.concat(out, self.tensor(p, dt, rank), int(b.get("dim", 0)) % rank)
        return out

    def clamp(self, node: fx.Node) -> Value:
        b = _bind(node)
        lo, hi = _scalar(b.get("min")), _scalar(b.get("max"))
        if lo is None or hi is None or not lo < hi:
            raise _Skip
        return self.g.clamp(self.tensor(b["self"], self.out_dtype(node)), lo, hi)

    def _arrives(self, node: fx.Node) -> None:
        """A glue value computed from lowered ones enters the program where glue makes it, not at its first
        reader, so fragments before that reader may still hold the ops between (unread inputs are dropped)."""
        val = _meta(node)
        if isinstance(val, torch.Tensor) and val.dtype in DTYPES:
            with contextlib.suppress(_Skip):  # not an operand the IR takes: it stays in torch
                self.tensor(node, DTYPES[val.dtype])

    # -- the walk ---------------------------------------------------------------------------------
    def run(self) -> Lowering:
        lowered: list[str] = []
        for node in self.nodes:
            if node.op in ("placeholder", "output") or (node.op == "get_attr" and all(
                    isinstance(u.target, torch._ops.HigherOrderOperator) for u in node.users)):
                continue  # a control-flow op's branch: refused with the op below
            if node.op != "call_function" or isinstance(node.target, torch._ops.HigherOrderOperator):
                where = source_line(node)
                raise CaptureError(f"{getattr(node.target, '__name__', node.target)} ({node.name}"
                                   f"{', at ' + where if where else ''}) can be neither lowered to mugraph's IR nor "
                                   "run by PyTorch as glue between fragments (control flow and other higher-order "
                                   "ops are not captured)")
            handler = self.handlers.get(node.target)
            value: Value | None = None
            if handler is not None:
                try:
                    value = handler(node)
                except _Skip:
                    value = None
                except MugraphError:  # shapes the IR refuses (say, over its device-memory limit): glue
                    value = None
            if value is None:
                self.glue.append(node.name)
                if any(isinstance(a, fx.Node) and (a.name in self.values or a.name in self.late)
                       for a in node.all_input_nodes):
                    self.late.add(node.name)
                    self._arrives(node)
            else:
                self.values[node.name] = value
                lowered.append(node.name)
        outputs: dict[str, str] = {}
        for node in self.nodes:
            readers = [u for u in node.users if u.op == "output" or u.name in self.glue]
            if node.name in self.values and readers:
                t = self.materialize(self.values[node.name])
                self.g.mark_output(t, node.name)
                outputs[node.name] = node.name
        if not outputs:
            raise CaptureError("no op of the model can be lowered to mugraph's IR (fp16 or bf16 matmul, linear, "
                               "element-wise ops, sum, mean, softmax, rms_norm, concat): nothing to optimise")
        graph, used = _compact(self.g, self.early_inputs)
        inputs = {n: s for n, s in self.inputs.items() if n in used}
        live = set(_live_lowered(self.nodes, self.values, outputs))
        return Lowering(graph, inputs, outputs, tuple(n for n in lowered if n in live), tuple(self.glue))


def _need(a: Any) -> float:
    s = _scalar(a)
    if s is None:
        raise _Skip
    return s


def _live_lowered(nodes: Sequence[fx.Node], values: dict[str, Value], outputs: dict[str, str]) -> list[str]:
    """Lowered nodes some program output depends on, in graph order."""
    live: set[str] = set(outputs)
    for node in reversed(nodes):
        if node.name in live:
            live.update(a.name for a in node.all_input_nodes if a.name in values)
    return [n.name for n in nodes if n.name in live]


def _compact(g: KernelGraph, early: set[str]) -> tuple[KernelGraph, set[str]]:
    """`g` without the ops no output needs, its early inputs first: rebuilt from its JSON (checked again).
    Returns the graph and the names of the inputs it kept."""
    ops = to_json(g)["ops"]
    live: set[int] = set()
    keep: list[int] = []
    for pos in reversed(range(len(g.ops))):
        op = g.ops[pos]
        if op.kind is OpKind.OUTPUT or live.intersection(op.outputs):
            keep.append(pos)
            live.update(op.inputs)
    keep.reverse()
    first = [p for p in keep if g.ops[p].kind is OpKind.INPUT and str(g.ops[p].attr("name")) in early]
    order = first + [p for p in keep if p not in set(first)]
    index: dict[int, int] = {}
    out: list[dict[str, Any]] = []
    for p in order:
        op = g.ops[p]
        out.append({**ops[p], "inputs": [index[t] for t in op.inputs]})
        for t in op.outputs:
            index[t] = len(index)
    used = {str(g.ops[p].attr("name")) for p in order if g.ops[p].kind is OpKind.INPUT}
    return from_json({"schema": SCHEMA, "ops": out}, g.limits, "captured program"), used


def lower(ep: torch.export.ExportedProgram) -> Lowering:
    """The mugraph program of an exported graph, and the glue around it."""
    return _Lowerer(ep).run()
