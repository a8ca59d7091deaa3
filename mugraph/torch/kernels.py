"""Running a program's ops on torch tensors: every graph-defined op as its emitted Triton kernel (compiled
for the CUDA device torch uses, in Triton's interpreter elsewhere), every pre-defined op as one torch call
computing in float32 and storing the tensor's dtype, as the kernels do; a norm with the weight and bias
it takes in (`ir/affine_norms.py`) as PyTorch's one norm call, and a matmul with its bias vector
(`ir/affine_linear.py`) as one `torch.addmm`, as the model runs them and the cost model prices them."""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import itertools
import math
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, assert_never

import torch
import torch.nn.functional as F

from mugraph.codegen.check import require_triton
from mugraph.codegen.emit_kernel import emit_kernel
from mugraph.codegen.errors import KERNELS_EXTRA_HINT
from mugraph.ir.affine_linear import LinearBias, linear_biases
from mugraph.ir.affine_norms import AffineNorm, affine_norms
from mugraph.ir.families import PREDEFINED
from mugraph.ir.graph import KernelGraph, Op, eps_of
from mugraph.ir.tiles import row_major_strides
from mugraph.ir.types import DType, OpKind, Shape
from mugraph.torch.errors import TorchError

TORCH_DTYPES = {DType.FLOAT16: torch.float16, DType.BFLOAT16: torch.bfloat16, DType.FLOAT32: torch.float32}


@functools.cache
def interpreting() -> bool:
    """Whether this process runs the kernels in Triton's interpreter (no CUDA device, or chosen with
    TRITON_INTERPRET=1): they then take tensors on any device; compiled, only CUDA tensors."""
    return not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def check_device(tensors: Sequence[torch.Tensor]) -> None:
    """Refuse, in words, tensors that compiled kernels cannot read: Triton compiles for the GPU where
    this machine has one, and its kernels take CUDA tensors only (the interpreter was not chosen)."""
    if interpreting() or all(t.device.type == "cuda" for t in tensors):
        return
    other = sorted({str(t.device) for t in tensors if t.device.type != "cuda"})
    raise TorchError(
        f"this machine has a CUDA device, so the kernels are compiled for it and take CUDA tensors, "
        f"but tensors are on {', '.join(other)}: move the model and its inputs to the GPU "
        f"(model.cuda(), x.cuda()), or set TRITON_INTERPRET=1 before Python starts to run the kernels "
        f"on the CPU in Triton's interpreter (slowly)"
    )


def check_model_device(model: object, args: Sequence[object]) -> None:
    """`check_device` over a model's parameters and buffers and its tensor arguments: before a search
    whose module could not run them."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        tensors += [*model.parameters(), *model.buffers()]
    check_device(tensors)


def kernels_source(
    graph: KernelGraph, strides: Mapping[int, Shape] = {}, *, interpreted: bool = False
) -> tuple[str, dict[int, tuple[str, list[tuple[int, ...]]]]]:
    """The Triton kernels of `graph`'s graph-defined ops as one module's text, and per op its kernel's
    name and the shapes of its float32 scratch tiles (one per concat). `strides` gives the element
    strides a kernel reads a program tensor with where they are not row-major (a transposed weight,
    read in place). `interpreted`: for Triton's interpreter (`emit_kernel`)."""
    lines = ["import triton", "import triton.language as tl", ""]
    kernels: dict[int, tuple[str, list[tuple[int, ...]]]] = {}
    for index, op in enumerate(graph.ops):
        if op.kind is OpKind.CUSTOMIZED:
            assert op.block is not None
            name = f"kernel_{len(kernels)}"
            layout = [strides.get(t) or row_major_strides(graph.tensors[t].shape) for t in (*op.inputs, *op.outputs)]
            ks = emit_kernel(
                op.block,
                name,
                [f"t{i}" for i in op.inputs],
                [f"op {index}: graph-defined"],
                layout,
                interpreted=interpreted,
            )
            lines += ["", *ks.lines, ""]
            kernels[index] = (name, [tuple(s) for s in ks.scratch])
    return "\n".join(lines) + "\n", kernels


_loaded = itertools.count()


@functools.cache
def _folder() -> Path:
    """One folder per process for the kernel modules it loads (@triton.jit reads a kernel's source back
    from its file), removed when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix="mugraph-torch-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def load_kernels(source: str) -> ModuleType:
    """Import the kernels' text: compiled for the CUDA device torch uses, or, without one, in Triton's
    interpreter (chosen when mugraph.torch was imported)."""
    require_triton()
    import triton.language as tl

    if not torch.cuda.is_available() and type(tl.sum).__name__ != "InterpretedFunction":
        raise TorchError(
            "Triton was imported in this process before mugraph.torch, without TRITON_INTERPRET=1, so "
            "its interpreter cannot run the kernels; import mugraph.torch first or set TRITON_INTERPRET=1"
        )
    name = f"mugraph_torch_kernels_{next(_loaded)}"
    path = _folder() / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton looks a kernel's module up by name
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise TorchError(f"the kernels cannot import {e.name or 'a module'} ({e}); {KERNELS_EXTRA_HINT}") from None
    return module


# Pre-defined ops that torch, given fp16 or bf16 tensors, would compute through intermediates rounded to
# that dtype: widened to float32 on every device.
WIDENED = frozenset({OpKind.RMS_NORM, OpKind.LAYER_NORM})


def torch_op(op: Op, args: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """A pre-defined op in torch: float32 arithmetic, the result stored in the program's dtype. On CUDA
    tensors torch's own kernels already compute fp16 and bf16 that way (float32 arithmetic and
    accumulation, one rounding), so the tensors go in as they are: a matmul on the tensor cores, not a
    float32 copy of its weight made at every call. Norms are widened everywhere."""
    k = op.kind
    if k not in PREDEFINED:
        raise TorchError(f"{k} is not a pre-defined op: the launcher runs it otherwise")
    if k is OpKind.CONCAT:
        return torch.cat(args, dim=op.int_attr("dim"))
    f = args if args and args[0].is_cuda and k not in WIDENED else [a.float() for a in args]
    eps = op.float_attr("eps") if any(k == "eps" for k, _ in op.attrs) else 0.0  # a norm's; 0 if none
    match k:
        case OpKind.MATMUL:
            out = torch.matmul(f[0], f[1])
        case OpKind.ADD:
            out = f[0] + f[1]
        case OpKind.MUL:
            out = f[0] * f[1]
        case OpKind.DIV:
            out = f[0] / f[1]
        case OpKind.EXP:
            out = torch.exp(f[0])
        case OpKind.SQUARE:
            out = f[0] * f[0]
        case OpKind.SQRT:
            out = torch.sqrt(f[0])
        case OpKind.SILU:
            out = F.silu(f[0])
        case OpKind.GELU:
            out = F.gelu(f[0], approximate="tanh")
        case OpKind.GELU_ERF:
            out = F.gelu(f[0])
        case OpKind.RELU:
            out = torch.relu(f[0])
        case OpKind.CLAMP:
            out = torch.clamp(f[0], op.float_attr("lo"), op.float_attr("hi"))
        case OpKind.MUL_SCALAR:
            out = f[0] * op.float_attr("scalar")
        case OpKind.REDUCTION:
            out = torch.sum(f[0], dim=op.int_attr("dim"), keepdim=True)
        case OpKind.RMS_NORM:
            out = f[0] / torch.sqrt(torch.mean(f[0] * f[0], dim=-1, keepdim=True) + eps)
        case OpKind.LAYER_NORM:
            out = F.layer_norm(f[0], f[0].shape[-1:], eps=eps)
        case _ as unreachable:
            assert_never(unreachable)
    return out.to(dtype).contiguous()


def affine_norm_op(norm: Op, steps: Sequence[OpKind], args: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """A norm and the weight mul and/or bias add it takes in as PyTorch's one call (`F.layer_norm(x, s,
    w, b, eps)`, `F.rms_norm(x, s, w, eps)`: x / sqrt(mean(x²) + eps) * w, as the IR's rms_norm then
    its mul), widened to float32 as `torch_op` widens norms, the result rounded once to `dtype`.
    `args`: x, then per step its vector."""
    x, *vectors = (a.float() for a in args)
    given = dict(zip(steps, (v.reshape(-1) for v in vectors), strict=True))
    weight, bias = given.get(OpKind.MUL), given.get(OpKind.ADD)
    if norm.kind is OpKind.LAYER_NORM:
        out = F.layer_norm(x, x.shape[-1:], weight, bias, eps_of(norm))
    elif norm.kind is OpKind.RMS_NORM and bias is None:
        out = F.rms_norm(x, x.shape[-1:], weight, eps_of(norm))
    else:
        raise TorchError(f"{norm.kind} with {', '.join(map(str, steps))}: not one PyTorch norm call")
    return out.to(dtype).contiguous()


def linear_bias_op(args: Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """A matmul and the bias vector add it takes in as PyTorch's one call, `torch.addmm(b, x, w)`: what
    `F.linear(x, W, b)` runs (w is W.T, read in place), the bias added in float32 before the one rounding
    to `dtype`. On CUDA tensors as they are, as `torch_op` runs a matmul; elsewhere widened to float32.
    `args`: x, w, the bias; x and w of leading 1-dims (a batch of one) are taken on their 2-d forms."""
    x, w, b = args if args[0].is_cuda else [a.float() for a in args]
    out = torch.addmm(b.reshape(-1), x.reshape(x.shape[-2:]), w.reshape(w.shape[-2:]))
    return out.reshape(*x.shape[:-1], w.shape[-1]).to(dtype).contiguous()


def fitted(t: torch.Tensor, strides: Sequence[int]) -> torch.Tensor:
    """`t` as a kernel reads it, with these element strides: itself where it has them (dims of extent 1
    aside, whose stride is never used), else a copy laid out so."""
    have = t.stride()
    if have == strides or all(n == 1 or s == w for n, s, w in zip(t.shape, have, strides, strict=True)):
        return t
    return torch.empty_strided(t.shape, tuple(strides), dtype=t.dtype, device=t.device).copy_(t)


@dataclass(frozen=True, slots=True)
class _KernelCall:
    """One graph-defined op's launch: the kernel indexed by its grid, the outputs' shapes and dtypes,
    the float32 scratch tiles' shapes, and the strides its inputs are read with."""

    launch: Callable[..., Any]
    outputs: tuple[tuple[Shape, torch.dtype], ...]
    scratch: tuple[tuple[int, ...], ...]
    strides: tuple[Shape, ...]


# Triton's interpreter keeps the kernel being run in process-wide state: two threads calling modules
# at once failed ("Did you forget to add @triton.jit ?"). Compiled kernels need no turn-taking.
_INTERPRETER = threading.Lock()


def _quiet_numpy(interpreted: bool) -> contextlib.AbstractContextManager[Any]:
    """NumPy's floating-point warnings off while Triton's interpreter runs a kernel."""
    if not interpreted:
        return contextlib.nullcontext()
    import numpy as np

    return np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore")


class Launcher:
    """The kernels of one program, and the call that runs any of its ops. A norm with the weight and
    bias it takes in, and a matmul with its bias, run as one call at the chain's last op (its inputs
    are all made by then); the chain's other ops make nothing (their outputs have no other reader)."""

    def __init__(self, program: KernelGraph, strides: Mapping[int, Shape]) -> None:
        self.program = program
        self.strides = {
            t: tuple(strides.get(t) or row_major_strides(program.tensors[t].shape))
            for op in program.ops
            if op.kind is OpKind.CUSTOMIZED
            for t in op.inputs
        }
        self.interpreted = interpreting()
        source, self.info = kernels_source(program, strides, interpreted=self.interpreted)
        self.module = load_kernels(source) if self.info else None
        self._calls: dict[int, _KernelCall] = {}
        self._norm_calls = {chain.absorbed[-1]: chain for chain in affine_norms(program).values()}
        self._folded = {i for chain in self._norm_calls.values() for i in (chain.norm, *chain.absorbed[:-1])}
        taken = {i for chain in self._norm_calls.values() for i in chain.absorbed}
        self._linear_calls = {pair.add: pair for pair in linear_biases(program, taken).values()}
        self._folded |= {pair.matmul for pair in self._linear_calls.values()}

    def run(self, index: int, tensors: dict[int, torch.Tensor], device: torch.device | None) -> tuple[int, ...]:
        """Run op `index` on `tensors` (program tensor -> value), adding what it makes; returns those."""
        if index in self._folded:
            return ()
        if index in self._norm_calls:
            return self._run_norm(self._norm_calls[index], tensors)
        if index in self._linear_calls:
            return self._run_linear(self._linear_calls[index], tensors)
        op = self.program.ops[index]
        args = [tensors[i] for i in op.inputs]
        if op.kind is not OpKind.CUSTOMIZED:
            tensors[op.outputs[0]] = torch_op(op, args, TORCH_DTYPES[self.program.tensors[op.outputs[0]].dtype])
            return op.outputs
        call = self._calls.get(index) or self._call(index)
        check_device(args)
        where = args[0].device if args else device
        outs = [torch.empty(shape, dtype=dtype, device=where) for shape, dtype in call.outputs]
        scratch = [torch.empty(shape, dtype=torch.float32, device=where) for shape in call.scratch]
        try:
            # the interpreter computes with NumPy, which warns of an exp that overflows on the way to
            # a right value (tanh-GELU's exp(2u) for large u gives tanh's ±1): not the user's business
            with _INTERPRETER if self.interpreted else contextlib.nullcontext(), _quiet_numpy(self.interpreted):
                call.launch(*[fitted(a, s) for a, s in zip(args, call.strides, strict=True)], *outs, *scratch)
        except Exception as e:  # Triton's own words for a tensor of another dtype are about tl.dot operands
            self._refuse_dtypes(op, args, e)
            raise
        tensors.update(zip(op.outputs, outs, strict=True))
        return op.outputs

    def _run_norm(self, chain: AffineNorm, tensors: dict[int, torch.Tensor]) -> tuple[int, ...]:
        """A norm's chain as one call, its result stored as the chain's last op's output."""
        *read, made = chain.tensors
        steps = [self.program.ops[i].kind for i in chain.absorbed]
        dtype = TORCH_DTYPES[self.program.tensors[made].dtype]
        tensors[made] = affine_norm_op(self.program.ops[chain.norm], steps, [tensors[t] for t in read], dtype)
        return (made,)

    def _run_linear(self, pair: LinearBias, tensors: dict[int, torch.Tensor]) -> tuple[int, ...]:
        """A matmul and its bias add as one call, its result stored as the add's output."""
        *read, made = pair.tensors
        dtype = TORCH_DTYPES[self.program.tensors[made].dtype]
        tensors[made] = linear_bias_op([tensors[t] for t in read], dtype)
        return (made,)

    def _refuse_dtypes(self, op: Op, args: Sequence[torch.Tensor], error: Exception) -> None:
        """Raise a TorchError where a kernel failed on a tensor whose dtype is not the program's: the
        model's parameters converted after optimize (model.double()), which the module shares."""
        for a, i in zip(args, op.inputs, strict=True):
            want = TORCH_DTYPES[self.program.tensors[i].dtype]
            if a.dtype != want:
                raise TorchError(
                    f"a kernel was given a {a.dtype} tensor where the program computes in {want}: the model's "
                    f"parameters or buffers were converted after it was optimised (the module shares them); "
                    f"convert them back, or optimise the model again in its new dtype"
                ) from error

    def _call(self, index: int) -> _KernelCall:
        """What a launch of op `index`'s kernel needs, worked out at its first call (the kernel's grid
        launcher, its tensors' shapes and strides), so that later calls only allocate and launch."""
        op = self.program.ops[index]
        assert op.block is not None and self.module is not None
        name, scratch_shapes = self.info[index]
        blocks = math.prod(op.block.grid)
        call = _KernelCall(
            getattr(self.module, name)[op.block.grid],
            tuple((self.program.tensors[o].shape, TORCH_DTYPES[self.program.tensors[o].dtype]) for o in op.outputs),
            tuple((blocks, *shape) for shape in scratch_shapes),
            tuple(self.strides[i] for i in op.inputs),
        )
        self._calls[index] = call
        return call

    @property
    def kernels(self) -> int:
        return len(self.info)

    @property
    def torch_calls(self) -> int:
        """The torch calls one run of the program makes (a norm with its weight and bias: one; a matmul
        with its bias: one)."""
        return sum(1 for i, op in enumerate(self.program.ops) if op.kind in PREDEFINED and i not in self._folded)
