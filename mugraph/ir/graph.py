"""Kernel graphs and block graphs, built op by op with every validity rule checked on the way.

A tensor is named by its index in the graph's flat list of op outputs (Mirage's convention, which
the canonical operator order of the search relies on). Graphs are append-only; a block graph is
closed once a graph-defined op uses it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

from mugraph.ir import shapes
from mugraph.ir.errors import (
    AccumulationError,
    BlockOutputLimitError,
    DeviceMemoryError,
    DTypeError,
    GraphStructureError,
    MappingError,
    SharedMemoryError,
)
from mugraph.ir.limits import DEFAULT_LIMITS, Limits
from mugraph.ir.names import check_tensor_name, shown
from mugraph.ir.shapes import fmt
from mugraph.ir.types import (
    ACCUMULATORS,
    IN_PLACE_BLOCK_OPS,
    Dim3,
    DType,
    OpKind,
    Shape,
)

Attr = int | float | str | tuple[int, ...]

_owner_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Tensor:
    """A device tensor (kernel graph) or shared-memory tensor (block graph)."""

    index: int
    shape: Shape
    dtype: DType
    owner: int = field(repr=False)
    after_accum: bool = False

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True, slots=True)
class Op:
    """One operator: its kind, input and output tensor indices, attributes, and block graph."""

    kind: OpKind
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: tuple[tuple[str, Attr], ...] = ()
    block: BlockGraph | None = None

    def attr(self, name: str) -> Attr:
        for key, value in self.attrs:
            if key == name:
                return value
        raise KeyError(f"{self.kind} has no attribute {name!r}")

    def int_attr(self, name: str) -> int:
        value = self.attr(name)
        assert isinstance(value, int)
        return value

    def float_attr(self, name: str) -> float:
        value = self.attr(name)
        assert isinstance(value, int | float)
        return float(value)

    def dims_attr(self, name: str) -> tuple[int, ...]:
        value = self.attr(name)
        assert isinstance(value, tuple)
        return value


_DTYPE_SHORT = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}


def _dtype(dtype: object, label: str) -> DType:
    """An input's dtype, or a DTypeError naming the three (and the one meant, for a short name)."""
    try:
        return DType(str(dtype))  # a user's value: a str, a DType, or torch's or NumPy's dtype
    except ValueError:
        said = f"{dtype.__module__}.{dtype.__name__}" if isinstance(dtype, type) else str(dtype)  # np.float16
        key = said.lower().removeprefix("torch.").removeprefix("numpy.")
        meant = _DTYPE_SHORT.get(key, key if key in set(DType) else None)
        hint = f" (for {said!r}, write {meant!r})" if meant else ""
        raise DTypeError(
            f"input {shown(label)}: dtype {said!r} is not one of {', '.join(d.value for d in DType)}{hint}"
        ) from None


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _eps_attr(kind: OpKind, x: object, eps: object) -> dict[str, Attr]:
    """The `eps` attribute of a normalisation: a finite float >= 0, stored only when not 0, so a
    graph without eps keeps the JSON and digest it had before eps existed."""
    if not _finite(eps) or float(eps) < 0:  # type: ignore[arg-type]
        raise GraphStructureError(f"{kind} {_shape_of(x)}: eps {eps!r} must be a finite number >= 0")
    value = float(eps)  # type: ignore[arg-type]
    return {"eps": value} if value != 0 else {}


def eps_of(op: Op) -> float:
    """A normalisation's or accum_rms's eps (0 when the op has none)."""
    return next((float(v) for k, v in op.attrs if k == "eps" and isinstance(v, int | float)), 0.0)


def _shape_of(t: object) -> str:
    return fmt(t.shape) if isinstance(t, Tensor) else repr(t)


class _Graph:
    """What kernel and block graphs share: tensors, ops, and the ops valid at both levels."""

    level = "graph"

    def __init__(self) -> None:
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self._owner = next(_owner_ids)
        self._closed = False

    # -- plumbing -------------------------------------------------------------------------
    def _operand(self, op: OpKind, t: Tensor) -> Tensor:
        if not isinstance(t, Tensor):
            raise GraphStructureError(f"{op}: operand {t!r} is not a tensor")
        if t.owner != self._owner:
            raise GraphStructureError(
                f"{op}: operand {fmt(t.shape)} belongs to another graph than this {self.level} graph"
            )
        return t

    def _operands(self, op: OpKind, *ts: Tensor) -> tuple[Tensor, ...]:
        if self._closed:
            raise GraphStructureError(f"{op}: this {self.level} graph is closed")
        checked = tuple(self._operand(op, t) for t in ts)
        if len({t.dtype for t in checked}) > 1:
            shown = ", ".join(f"{fmt(t.shape)} {t.dtype}" for t in checked)
            raise DTypeError(f"{op}: operands {shown} have different dtypes; they must be equal")
        return checked

    def _after_accum(self, op: OpKind, ts: Sequence[Tensor]) -> bool:
        return False

    def _account(self, op: OpKind, new: Sequence[Tensor]) -> None:
        """Check memory limits before the op's outputs are committed."""

    def _add(
        self,
        kind: OpKind,
        inputs: Sequence[Tensor],
        out_shapes: Sequence[Shape],
        dtype: DType,
        attrs: Sequence[tuple[str, Attr]] = (),
        block: BlockGraph | None = None,
        after_accum: bool | None = None,
    ) -> list[Tensor]:
        flag = self._after_accum(kind, inputs) if after_accum is None else after_accum
        start = len(self.tensors)
        outs = [
            Tensor(start + i, shapes.check_shape(s, f"{kind} output"), dtype, self._owner, flag)
            for i, s in enumerate(out_shapes)
        ]
        self._account(kind, outs)
        self.tensors.extend(outs)
        self.ops.append(Op(kind, tuple(t.index for t in inputs), tuple(t.index for t in outs), tuple(attrs), block))
        return outs

    def _one(self, kind: OpKind, inputs: Sequence[Tensor], shape: Shape, **attrs: Attr) -> Tensor:
        return self._add(kind, inputs, [shape], inputs[0].dtype, sorted(attrs.items()))[0]

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]

    # -- ops valid at both levels ---------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        a, b = self._operands(OpKind.MATMUL, a, b)
        return self._one(OpKind.MATMUL, (a, b), shapes.matmul(a.shape, b.shape))

    def _unary(self, kind: OpKind, x: Tensor, **attrs: Attr) -> Tensor:
        (x,) = self._operands(kind, x)
        return self._one(kind, (x,), x.shape, **attrs)

    def exp(self, x: Tensor) -> Tensor:
        return self._unary(OpKind.EXP, x)

    def square(self, x: Tensor) -> Tensor:
        return self._unary(OpKind.SQUARE, x)

    def sqrt(self, x: Tensor) -> Tensor:
        return self._unary(OpKind.SQRT, x)

    def silu(self, x: Tensor) -> Tensor:
        return self._unary(OpKind.SILU, x)

    def gelu(self, x: Tensor) -> Tensor:
        """The tanh form of GELU (Mirage's)."""
        return self._unary(OpKind.GELU, x)

    def gelu_erf(self, x: Tensor) -> Tensor:
        """The exact form, x·Φ(x) = x/2·(1 + erf(x/√2)): PyTorch's `gelu` without `approximate`."""
        return self._unary(OpKind.GELU_ERF, x)

    def relu(self, x: Tensor) -> Tensor:
        return self._unary(OpKind.RELU, x)

    def mul_scalar(self, x: Tensor, scalar: float) -> Tensor:
        if not _finite(scalar):
            raise GraphStructureError(f"mul_scalar {_shape_of(x)}: scalar {scalar!r} must be a finite number")
        return self._unary(OpKind.MUL_SCALAR, x, scalar=float(scalar))

    def clamp(self, x: Tensor, lo: float, hi: float) -> Tensor:
        if not (_finite(lo) and _finite(hi)) or not lo < hi:
            raise GraphStructureError(
                f"clamp {_shape_of(x)}: lower bound {lo!r} must be a finite number below upper bound {hi!r}"
            )
        return self._unary(OpKind.CLAMP, x, lo=float(lo), hi=float(hi))

    def _binary(self, kind: OpKind, a: Tensor, b: Tensor) -> Tensor:
        a, b = self._operands(kind, a, b)
        return self._one(kind, (a, b), shapes.elementwise(kind, a.shape, b.shape))

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary(OpKind.ADD, a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary(OpKind.MUL, a, b)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        return self._binary(OpKind.DIV, a, b)

    def reduction(self, x: Tensor, dim: int) -> Tensor:
        """Sum over `dim`, keeping it with size 1."""
        (x,) = self._operands(OpKind.REDUCTION, x)
        return self._one(OpKind.REDUCTION, (x,), shapes.reduction(x.shape, dim), dim=dim)

    def rms_norm(self, x: Tensor, eps: float = 0.0) -> Tensor:
        """x / sqrt(mean(x**2) + eps) over the last dim (no weight: a torch RMSNorm's weight is a
        separate mul). eps = 0 is Mirage's form."""
        (x,) = self._operands(OpKind.RMS_NORM, x)
        return self._one(OpKind.RMS_NORM, (x,), x.shape, **_eps_attr(OpKind.RMS_NORM, x, eps))

    def layer_norm(self, x: Tensor, eps: float = 0.0) -> Tensor:
        """(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps) over the last dim; no affine (the
        weight and bias stay separate mul and add ops)."""
        (x,) = self._operands(OpKind.LAYER_NORM, x)
        return self._one(OpKind.LAYER_NORM, (x,), x.shape, **_eps_attr(OpKind.LAYER_NORM, x, eps))

    def concat(self, a: Tensor, b: Tensor, dim: int) -> Tensor:
        a, b = self._operands(OpKind.CONCAT, a, b)
        return self._one(OpKind.CONCAT, (a, b), shapes.concat(a.shape, b.shape, dim), dim=dim)

    # -- queries --------------------------------------------------------------------------
    def ops_of(self, kind: OpKind) -> list[Op]:
        return [op for op in self.ops if op.kind is kind]

    @property
    def input_tensors(self) -> list[Tensor]:
        return [self.tensors[op.outputs[0]] for op in self.ops_of(OpKind.INPUT)]


class BlockGraph(_Graph):
    """A graph-defined op's body: what one thread block computes, for every for-loop iteration.

    Inputs read a tile of a device tensor (imap splits dims over the grid, fmap over the
    for-loop); accumulators sum over iterations; ops fed by accumulators run once after the loop.
    """

    level = "block"

    def __init__(
        self,
        grid: Sequence[int],
        forloop: int = 1,
        block: Sequence[int] = (128, 1, 1),
        rdx: int = 64,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__()
        self.grid: Dim3 = shapes.check_dim3(grid, "grid")
        self.block: Dim3 = shapes.check_dim3(block, "block dims")
        if not isinstance(forloop, int) or isinstance(forloop, bool) or forloop < 1:
            raise MappingError(f"for-loop range {forloop!r} must be a positive integer")
        if not isinstance(rdx, int) or isinstance(rdx, bool) or rdx < 1:
            raise MappingError(f"reduction_dimx {rdx!r} must be a positive integer")
        blocks = prod(self.grid)
        if blocks > limits.max_blocks:
            raise MappingError(f"grid {list(self.grid)} has {blocks} blocks; at most {limits.max_blocks} allowed")
        self.forloop = forloop
        self.rdx = rdx
        self.limits = limits
        self.sources: list[Tensor] = []  # the device tensor behind each input, in order
        self.output_shapes: list[Shape] = []
        self.smem_bytes = 0

    def _after_accum(self, op: OpKind, ts: Sequence[Tensor]) -> bool:
        flags = {t.after_accum for t in ts}
        if len(flags) > 1:
            described = ", ".join(f"{fmt(t.shape)} ({'after' if t.after_accum else 'before'} accumulation)" for t in ts)
            raise AccumulationError(f"{op}: operands {described} mix the loop body and its result")
        return flags.pop() if flags else False

    def _account(self, op: OpKind, new: Sequence[Tensor]) -> None:
        if op in IN_PLACE_BLOCK_OPS or op is OpKind.OUTPUT:
            return
        extra = sum(t.nbytes for t in new)
        if self.smem_bytes + extra > self.limits.smem_bytes:
            shown = ", ".join(fmt(t.shape) for t in new)
            raise SharedMemoryError(
                f"{op} {shown}: shared memory would reach {self.smem_bytes + extra} bytes, "
                f"over the limit of {self.limits.smem_bytes}"
            )
        self.smem_bytes += extra

    def new_input(self, dtensor: Tensor, imap: Sequence[int], fmap: int = -1) -> Tensor:
        """Read `dtensor`: imap names the dim each grid axis splits (-1 replicates), fmap the
        dim the for-loop splits (-1: the same tile every iteration)."""
        if self._closed:
            raise GraphStructureError("input: this block graph is closed")
        if not isinstance(dtensor, Tensor):
            raise GraphStructureError(f"input: {dtensor!r} is not a device tensor")
        im, tile = shapes.block_input_tile(dtensor.shape, self.grid, imap, fmap, self.forloop)
        attrs: list[tuple[str, Attr]] = [("fmap", fmap), ("imap", im)]
        out = self._add(OpKind.INPUT, (), [tile], dtensor.dtype, attrs, after_accum=False)[0]
        self.sources.append(dtensor)  # only once the input is accepted
        return out

    def forloop_accum(self, x: Tensor, kind: OpKind | str = OpKind.ACCUM_NO_RED, eps: float = 0.0) -> Tensor:
        """Accumulate over the for-loop: no_red (sum of iterations), sum / mean / rms over the
        last dim too, or redtox (last dim folded, strided, to reduction_dimx). rms is
        sqrt(mean(x**2) + eps); only rms takes an eps."""
        op = OpKind(kind)
        if op not in ACCUMULATORS:
            raise GraphStructureError(f"{op} is not a for-loop accumulator")
        attrs = _eps_attr(op, x, eps)
        if attrs and op is not OpKind.ACCUM_RMS:
            raise GraphStructureError(f"{op}: only accum_rms takes an eps, got eps={eps!r}")
        (x,) = self._operands(op, x)
        if x.after_accum:
            raise AccumulationError(f"{op}: input {fmt(x.shape)} is already accumulated")
        out = shapes.accumulator(op, x.shape, self.rdx)
        return self._add(op, (x,), [out], x.dtype, sorted(attrs.items()), after_accum=True)[0]

    def accum_no_red(self, x: Tensor) -> Tensor:
        return self.forloop_accum(x, OpKind.ACCUM_NO_RED)

    def accum_sum(self, x: Tensor) -> Tensor:
        return self.forloop_accum(x, OpKind.ACCUM_SUM)

    def accum_mean(self, x: Tensor) -> Tensor:
        return self.forloop_accum(x, OpKind.ACCUM_MEAN)

    def accum_rms(self, x: Tensor, eps: float = 0.0) -> Tensor:
        """sqrt(mean of x**2 over the loop and the last dim + eps)."""
        return self.forloop_accum(x, OpKind.ACCUM_RMS, eps)

    def accum_redtox(self, x: Tensor) -> Tensor:
        return self.forloop_accum(x, OpKind.ACCUM_REDTOX)

    def new_output(self, x: Tensor, omap: Sequence[int]) -> None:
        """Write `x` (an accumulated tensor) to a device tensor; block b fills chunk b along
        the dim each grid axis maps in omap."""
        (x,) = self._operands(OpKind.OUTPUT, x)
        if not x.after_accum:
            raise AccumulationError(
                f"output: {fmt(x.shape)} is not accumulated; pass it through a for-loop accumulator"
            )
        if len(self.output_shapes) >= self.limits.max_block_outputs:
            raise BlockOutputLimitError(
                f"output {fmt(x.shape)}: a block graph has at most {self.limits.max_block_outputs} outputs"
            )
        om, dshape = shapes.block_output_shape(x.shape, self.grid, omap)
        self.output_shapes.append(dshape)
        self._add(OpKind.OUTPUT, (x,), [], x.dtype, [("omap", om)])


class KernelGraph(_Graph):
    """A μGraph's top level: device tensors, pre-defined kernel ops and graph-defined ops."""

    level = "kernel"

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__()
        self.limits = limits
        self.dmem_bytes = 0

    def _account(self, op: OpKind, new: Sequence[Tensor]) -> None:
        extra = sum(t.nbytes for t in new)
        if self.dmem_bytes + extra > self.limits.dmem_bytes:
            shown = ", ".join(fmt(t.shape) for t in new)
            raise DeviceMemoryError(
                f"{op} {shown}: device memory would reach {self.dmem_bytes + extra} bytes, "
                f"over the limit of {self.limits.dmem_bytes}"
            )
        self.dmem_bytes += extra

    def new_input(self, shape: Sequence[int], dtype: DType | str = DType.FLOAT16, name: str | None = None) -> Tensor:
        if self._closed:
            raise GraphStructureError("input: this kernel graph is closed")
        label = check_tensor_name(name if name is not None else f"in{len(self.ops_of(OpKind.INPUT))}", "input")
        if label in self._names(OpKind.INPUT):
            raise GraphStructureError(
                f"input name {shown(label)} is taken by another input; inputs are given by name, so each needs its own"
            )
        dims = shapes.check_shape(shape, f"input {label}")
        dt = _dtype(dtype, label)
        attrs: list[tuple[str, Attr]] = [("dtype", dt.value), ("name", label), ("shape", dims)]
        return self._add(OpKind.INPUT, (), [dims], dt, attrs)[0]

    def customized(self, block: BlockGraph, inputs: Sequence[Tensor] | None = None) -> list[Tensor]:
        """A graph-defined op running `block` on every block of its grid; returns its outputs."""
        if not isinstance(block, BlockGraph):
            raise GraphStructureError(f"customized: {block!r} is not a block graph")
        if block._closed:
            raise GraphStructureError("customized: this block graph is already used by an op")
        srcs = list(block.sources)
        if inputs is not None:
            self._operands(OpKind.CUSTOMIZED, *inputs)  # foreign tensors get their own message
        if inputs is not None and list(inputs) != srcs:
            given = ", ".join(_shape_of(t) for t in inputs)
            wanted = ", ".join(fmt(t.shape) for t in srcs)
            raise GraphStructureError(
                f"customized: inputs ({given}) must be the block graph's input tensors ({wanted}) "
                "in the order of its new_input calls"
            )
        if not block.output_shapes:
            raise GraphStructureError("customized: the block graph has no outputs")
        checked = self._operands(OpKind.CUSTOMIZED, *srcs)
        dtype = checked[0].dtype if checked else DType.FLOAT16
        outs = self._add(OpKind.CUSTOMIZED, checked, block.output_shapes, dtype, block=block)
        block._closed = True
        return outs

    def mark_output(self, x: Tensor, name: str | None = None) -> None:
        (x,) = self._operands(OpKind.OUTPUT, x)
        label = check_tensor_name(name if name is not None else f"out{len(self.ops_of(OpKind.OUTPUT))}", "output")
        if label in self._names(OpKind.OUTPUT):
            raise GraphStructureError(
                f"output name {shown(label)} is taken by another output; outputs are returned "
                "by name, so each needs its own"
            )
        self._add(OpKind.OUTPUT, (x,), [], x.dtype, [("name", label)])

    def _names(self, kind: OpKind) -> set[str]:
        return {str(op.attr("name")) for op in self.ops_of(kind)}

    @property
    def output_tensors(self) -> list[Tensor]:
        return [self.tensors[op.inputs[0]] for op in self.ops_of(OpKind.OUTPUT)]

    def input_signature(self) -> list[tuple[str, Shape, DType]]:
        return [
            (str(op.attr("name")), self.tensors[op.outputs[0]].shape, self.tensors[op.outputs[0]].dtype)
            for op in self.ops_of(OpKind.INPUT)
        ]
