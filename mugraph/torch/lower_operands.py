"""The operands of a lowering: how a value PyTorch computes (a user input, a parameter, a glue op's result)
enters the program as an input named after its node, and the helpers that read an fx node's arguments.

A torch value of lower rank than an op needs is reshaped with leading 1-dims, a linear layer's weight is
read transposed, and a scalar operand is a constant input filled with it; each is an `InputSource` that
the drop-in module replays with the values of the moment it runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch.fx.node import Argument

from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.types import MAX_DIMS, DType

DTYPES = {torch.float16: DType.FLOAT16, torch.bfloat16: DType.BFLOAT16}


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
class Recip:
    """1/t, kept symbolic so that a * rsqrt(b) lowers to a / sqrt(b)."""

    t: Tensor


Value = Tensor | Recip


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
    return node.meta.get("val")


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

    def _dtype(self, node: fx.Node) -> DType:
        val = meta(node)
        if not isinstance(val, torch.Tensor) or val.dtype not in DTYPES:
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

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names or name in self.inputs:
            name, k = f"{base}_{k}", k + 1
        return name

    def tensor(self, a: Any, dtype: DType, rank: int | None = None) -> Tensor:
        """The program tensor of fx value `a` (lowered, or a new input for a torch value), of `dtype`
        and, where given, `rank` (a torch value of lower rank is reshaped with leading 1-dims)."""
        if not isinstance(a, fx.Node):
            raise Skip
        if a.name in self.values:
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
        if isinstance(v, Recip):
            return self.g.div(self.const(1.0, v.t.dtype, len(v.t.shape)), v.t)
        return v
