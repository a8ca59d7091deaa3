"""The operands of a lowering: how a value PyTorch computes (a user input, a parameter, a glue op's result)
enters the program as an input named after its node, and the helpers that read an fx node's arguments.

A torch value of lower rank than an op needs is reshaped with leading 1-dims, a linear layer's weight is
read transposed, and a scalar operand is a constant input filled with it; each is an `InputSource` that
the drop-in module replays with the values of the moment it runs.

An op that works row by row over the last dim (element-wise ops, norms, last-dim sums, a linear layer)
on a tensor of 3 or more dims, [B, S, D], is lowered on its 2-d form [B·S, D] (a `Frame` that is
`flat`): its torch operands enter reshaped, a broadcast weight [D] as [1, D], and its result stays 2-d
in the program, so a pre-norm MLP on [B, S, D] is the program of the same MLP on [B·S, D]. A 2-d value
leaving the program is reshaped back by the module (the torch node's shape).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch.fx.node import Argument

from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.types import MAX_DIMS, DType

DTYPES = {torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16, torch.float32: DType.FLOAT32}


@dataclass(frozen=True)
class InputSource:
    """How PyTorch computes one program input: an fx value as it is (`value`), its 2-d transpose
    (`transpose`: a linear layer's weight), reshaped with leading 1-dims (`reshape`: a bias), times a
    scalar (`scale`: attention's Q), reshaped or transposed then times a scalar (`reshape_scale`:
    a norm's weight with the constant its output was multiplied by; `transpose_scale`: LoRA's B
    with alpha/r), or a constant (`const`: a scalar operand). `shift` is added before any scale: a
    Gemma norm's weight, which its output is multiplied by as (1 + w). `rows` (start, stop) takes those
    rows of the value first: the part of a fused linear layer's weight (and bias) that one piece of its
    split output reads (a SwiGLU's gate and up projections in one `nn.Linear`, then `chunk`)."""

    kind: str
    node: str | None
    shape: tuple[int, ...]
    dtype: DType
    value: float = 0.0
    shift: float = 0.0
    rows: tuple[int, int] | None = None


@dataclass(frozen=True)
class Recip:
    """1/t, kept symbolic so that a * rsqrt(b) lowers to a / sqrt(b)."""

    t: Tensor


Value = Tensor | Recip


@dataclass(frozen=True)
class Frame:
    """How an op's operands are read: `out` is the op's torch output shape; `flat`: on 2-d forms
    [prod(leading dims), last dim] (see the module's docstring)."""

    out: tuple[int, ...]
    flat: bool

    @property
    def rank(self) -> int:
        """The rank of the op's program tensors."""
        return 2 if self.flat else len(self.out)


def flat_shape(shape: Sequence[int], out: Sequence[int]) -> tuple[int, ...] | None:
    """The 2-d form of an operand of torch shape `shape` read by a row-wise op whose output is `out`:
    [rows, d] where its leading dims are `out`'s, [1, d] where it is broadcast over every row; None
    where it is neither (broadcast over some leading dims only), which no 2-d form reads exactly."""
    if len(shape) > len(out):
        return None
    pad = (1,) * (len(out) - len(shape)) + tuple(shape)
    if tuple(pad[:-1]) == tuple(out[:-1]):
        return (prod(pad[:-1]), pad[-1])
    if all(d == 1 for d in pad[:-1]):
        return (1, pad[-1])
    return None


class Skip(Exception):
    """This node is glue: PyTorch runs it."""


def source_line(node: fx.Node) -> str:
    """`file:line` of the user's code that made `node` (the innermost frame torch recorded), or ''."""
    trace = str(node.meta.get("stack_trace") or "")
    torch_dir = f'File "{Path(torch.__file__).parent}{os.sep}'  # torch's own frames, not a user's torch/ folder
    frames = [ln.strip() for ln in trace.splitlines() if ln.strip().startswith('File "')]
    lines = [ln for ln in frames if "<eval_with_key>" not in ln and not ln.startswith(torch_dir)]
    if not lines:
        return ""
    last = lines[-1]  # File "path", line N, in fn
    try:
        path = last.split('"')[1]
        line = last.split(", line ")[1].split(",")[0]
    except IndexError:
        return ""
    return f"{path}:{line}"


def meta(node: fx.Node) -> Any:
    """The value torch.export traced for `node`; None for one whose size depends on the data (the
    result of `nonzero`, of a boolean mask's indexing, or a count read from a tensor): such a value has
    no shape a program could be made for, so every op making or reading it stays glue."""
    val = node.meta.get("val")
    return None if data_dependent(val) else val


def data_dependent(val: object) -> bool:
    """Whether a traced value (a tensor, a number, or a tuple of them) has a size or value that
    torch.export could only name by a symbol (an unbacked SymInt): its size depends on the data."""
    if isinstance(val, torch.Tensor):
        return any(not isinstance(d, int) for d in val.shape)
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    return isinstance(val, list | tuple) and any(data_dependent(v) for v in val)


def bind(node: fx.Node) -> dict[str, Argument]:
    """The op's arguments by schema name, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    out: dict[str, Argument] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
    return out


def scalar(a: Any) -> float | None:
    return float(a) if isinstance(a, int | float) and not isinstance(a, bool) else None


def need(a: Any) -> float:
    s = scalar(a)
    if s is None:
        raise Skip
    return s


class Operands:
    """The program being built and the torch values that enter it."""

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
        self.dtype = program_dtype(self.nodes)
        self.flat_ok: set[str] = set()  # nodes whose ops may read 2-d forms (`flatten.held_flat`)

    def _dtype(self, node: fx.Node) -> DType:
        """The program's dtype, where `node` is a tensor of it (of 1 to 4 static dims); else Skip."""
        val = meta(node)
        if not isinstance(val, torch.Tensor) or DTYPES.get(val.dtype) is not self.dtype:
            raise Skip
        shape = tuple(val.shape)
        if not 1 <= len(shape) <= MAX_DIMS or any(not isinstance(d, int) or d < 1 for d in shape):
            raise Skip
        return DTYPES[val.dtype]

    def _shape(self, node: fx.Node) -> tuple[int, ...]:
        return tuple(int(d) for d in meta(node).shape)

    def _new_input(self, name: str, src: InputSource, early: bool) -> Tensor:
        if name not in self.input_tensor:
            self.inputs[name] = src
            self.input_tensor[name] = self.g.new_input(src.shape, src.dtype, name)
            if early:
                self.early_inputs.add(name)
        return self.input_tensor[name]

    def _made(self, src: InputSource) -> str | None:
        """The name of the program input already made as `src`, if any: one input per way torch computes
        a value, shared by every reader."""
        return next((n for n, s in self.inputs.items() if s == src), None)

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names or name in self.inputs:
            name, k = f"{base}_{k}", k + 1
        return name

    def is_flat(self, a: fx.Node) -> bool:
        """A lowered value held in the program on its 2-d form (its torch shape has more dims)."""
        v = self.values[a.name]
        return (v.t if isinstance(v, Recip) else v).shape != self._shape(a)

    def frame(self, node: fx.Node, operands: Sequence[Any], rowwise: bool = True) -> Frame:
        """How `node`'s tensor operands are read: on their 2-d forms where the op is row-wise, its output
        has 3 or more dims and every operand has a 2-d form the program holds or can make."""
        out = self._shape(node)
        if not rowwise or len(out) < 3 or node.name not in self.flat_ok:
            return Frame(out, False)
        for a in operands:
            if not isinstance(a, fx.Node):
                continue
            fs = flat_shape(self._shape(a), out)
            if fs is None:
                return Frame(out, False)
            if a.name in self.values:
                v = self.values[a.name]
                if (v.t if isinstance(v, Recip) else v).shape != fs:
                    return Frame(out, False)
        return Frame(out, True)

    def operand(self, a: Any, dtype: DType, f: Frame) -> Tensor:
        """The program tensor of operand `a` (an fx value or a number) of an op read as `f` says."""
        if not isinstance(a, fx.Node):
            return self.const(need(a), dtype, f.rank)
        if not f.flat:
            return self.tensor(a, dtype, f.rank)
        fs = flat_shape(self._shape(a), f.out)
        if fs is None:
            raise Skip
        if a.name in self.values:
            t = self.values[a.name] = self.materialize(self.values[a.name])
            if t.dtype is not dtype or t.shape != fs:
                raise Skip
            return t
        if self._dtype(a) is not dtype:
            raise Skip
        shape = self._shape(a)
        early = a.name not in self.late
        if fs == shape:
            return self._new_input(a.name, InputSource("value", a.name, shape, dtype), early)
        src = InputSource("reshape", a.name, fs, dtype)
        if (made := self._made(src)) is not None:  # one 2-d form per value
            return self.input_tensor[made]
        if fs == (1,) * (2 - len(shape)) + shape:  # only leading 1-dims: named as `tensor` names them
            name = self._fresh(f"{a.name}_r2")
        else:  # rows folded: the value's own name where free, as the 2-d model's input has it
            name = a.name if a.name not in self.inputs else self._fresh(f"{a.name}_2d")
        return self._new_input(name, src, early)

    def tensor(self, a: Any, dtype: DType, rank: int | None = None) -> Tensor:
        """The program tensor of fx value `a` (lowered, or a new input for a torch value), of `dtype`
        and, where given, `rank` (a torch value of lower rank is reshaped with leading 1-dims)."""
        if not isinstance(a, fx.Node):
            raise Skip
        if a.name in self.values:
            if self.is_flat(a):
                raise Skip  # held on its 2-d form: an op needing its dims is glue
            t = self.values[a.name] = self.materialize(self.values[a.name])  # 1/t made once
            if t.dtype is not dtype or (rank is not None and len(t.shape) != rank):
                raise Skip
            return t
        if self._dtype(a) is not dtype:
            raise Skip
        shape = self._shape(a)
        early = a.name not in self.late
        if rank is None or len(shape) == rank:
            return self._new_input(a.name, InputSource("value", a.name, shape, dtype), early)
        if len(shape) > rank:
            raise Skip
        full = (1,) * (rank - len(shape)) + shape
        src = InputSource("reshape", a.name, full, dtype)  # one reshaped input per value and rank
        return self._new_input(self._made(src) or self._fresh(f"{a.name}_r{rank}"), src, early)

    def const(self, value: float, dtype: DType, rank: int) -> Tensor:
        src = InputSource("const", None, (1,) * rank, dtype, value)
        if (made := self._made(src)) is not None:
            return self.input_tensor[made]
        name = self._fresh(f"const{self.n_consts}")
        self.n_consts += 1
        return self._new_input(name, src, True)

    def materialize(self, v: Value) -> Tensor:
        """A value as a program tensor (1/t as a division, made once by the callers that store it)."""
        if isinstance(v, Recip):
            return self.g.div(self.const(1.0, v.t.dtype, len(v.t.shape)), v.t)
        return v


def program_dtype(nodes: Sequence[fx.Node]) -> DType:
    """The dtype the program computes in: that of most of the model's floating inputs, parameters and
    buffers (ties: the first met), so an fp16 model's float32 buffers (rotary frequencies) stay glue."""
    seen: Counter[DType] = Counter()
    for n in nodes:
        val = meta(n)
        if n.op == "placeholder" and isinstance(val, torch.Tensor) and val.dtype in DTYPES:
            seen[DTYPES[val.dtype]] += 1
    return seen.most_common(1)[0][0] if seen else DType.FLOAT16
