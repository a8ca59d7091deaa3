"""A kernel graph as one self-contained Python module: a Triton kernel per graph-defined op, one array
call per pre-defined kernel op, and `run(inputs) -> outputs`.

The module picks its array library when it is imported: CuPy where a CUDA device is usable (Triton
compiles the kernels), NumPy elsewhere or when TRITON_INTERPRET=1 (Triton's interpreter runs them on
the CPU). Device tensors are row-major in the program's dtype (fp16, or float32 for a float32
program); array calls compute in float32 and store that dtype, as the kernels do.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import assert_never

from mugraph import __version__
from mugraph.codegen.emit_kernel import emit_kernel, live_tensors
from mugraph.codegen.errors import CodegenError
from mugraph.codegen.text import inert, wrap_code, wrap_text
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.families import PREDEFINED
from mugraph.ir.graph import KernelGraph, Op, eps_of
from mugraph.ir.plural import counted
from mugraph.ir.shapes import fmt
from mugraph.ir.tiles import layout_strides, row_major_strides
from mugraph.ir.types import DType, OpKind


@dataclass(frozen=True)
class EmitInfo:
    """What the header says the module came from. `layouts` holds free lines (the chosen layouts,
    as `mugraph show` prints them); `inner` the chosen innermost dim of each device tensor of this
    graph (empty: row-major); `digest` defaults to the graph's canonical digest."""

    program: str
    config: str = "-"
    digest: str | None = None
    layouts: Sequence[str] = field(default_factory=tuple)
    inner: Sequence[int] = field(default_factory=tuple)
    tf32: bool = False  # float32 programs: tl.dot takes TF32 operands (docs/semantics.md)


# Triton makes its language functions when it is first imported, in the mode TRITON_INTERPRET says
# then: the module imports it once its own choice is made, and says so where a process imported it
# before in the other mode (its interpreter cannot call compiled language functions).
TRITON_IMPORT = """import triton  # noqa: E402
import triton.language as tl  # noqa: E402

"""
TRITON_IMPORTED_BEFORE = """    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise ImportError(
            "Triton was imported in this process without TRITON_INTERPRET=1, so its interpreter cannot run "
            "these kernels on the CPU: import this module before Triton, or set TRITON_INTERPRET=1"
        )
"""

PRELUDE = '''
from __future__ import annotations

import importlib
import math
import os
{sys}from collections.abc import Mapping
from typing import Any

import numpy as np


def _on_gpu() -> bool:
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:
        return bool(importlib.import_module("cupy").cuda.is_available())
    except Exception:  # no CuPy, or no CUDA driver
        return False


ON_GPU = _on_gpu()
if not ON_GPU:
{interpret}    os.environ["TRITON_INTERPRET"] = "1"  # read when Triton is first imported, below
{triton}xp: Any = importlib.import_module("cupy") if ON_GPU else np
DEVICE_DTYPE: Any = xp.{dtype}  # every device tensor's


class _HostArg:
    """A NumPy array as Triton's interpreter takes a kernel argument: data_ptr() and dtype, plus the
    torch-shaped calls it makes to copy an argument to the host and back (no-ops: it is there)."""

    def __init__(self, array: Any) -> None:
        self.array = array
        self.dtype = array.dtype

    def data_ptr(self) -> int:
        return int(self.array.ctypes.data)

    def untyped_storage(self) -> _HostArg:
        return self

    def cpu(self) -> _HostArg:
        return self

    def new_empty(self, *args: Any, **kwargs: Any) -> _HostArg:
        return self

    def set_(self, *args: Any) -> _HostArg:
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def copy_(self, other: Any) -> _HostArg:
        return self


class _DeviceArg:
    """A CuPy array as a compiled Triton kernel takes it: data_ptr() and dtype."""

    def __init__(self, array: Any) -> None:
        self.array = array
        self.dtype = array.dtype

    def data_ptr(self) -> int:
        return int(self.array.data.ptr)


def _arg(array: Any) -> Any:
    return _DeviceArg(array) if ON_GPU else _HostArg(array)


def _f32(a: Any) -> Any:
    """An array call's operand. NumPy's fp16 loops round every step, so the host computes in float32;
    CuPy's fp16 kernels compute in float32 registers and cuBLAS accumulates fp16 products in float32."""
    return a if ON_GPU else a.astype(xp.float32)


def _f16(a: Any) -> Any:
    """An array call's result: the device dtype and row-major, as kernels read it (no copy when it
    already is)."""
    if a.dtype == DEVICE_DTYPE and a.flags.c_contiguous:
        return a
    return a.astype(DEVICE_DTYPE, order="C")


def _empty(shape: tuple[int, ...], inner: int) -> Any:
    """A device array whose dim `inner` is innermost (stride 1), the other dims row-major around it."""
    order = [d for d in range(len(shape)) if d != inner] + [inner]
    a = xp.empty([shape[d] for d in order], dtype=DEVICE_DTYPE)
    return a.transpose([order.index(d) for d in range(len(shape))])


def _silu(x: Any) -> Any:
    return x / (1.0 + xp.exp(-x))


def _gelu(x: Any) -> Any:
    return 0.5 * x * (1.0 + xp.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def _gelu_erf(x: Any) -> Any:
    if ON_GPU:
        return 0.5 * x * (1.0 + importlib.import_module("cupyx.scipy.special").erf(x * 0.7071067811865476))
    return 0.5 * x * (1.0 + np.vectorize(math.erf, otypes=[np.float32])(x * 0.7071067811865476))


def _rms_norm(x: Any, eps: float = 0.0) -> Any:
    return x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps)


def _layer_norm(x: Any, eps: float = 0.0) -> Any:
    c = x - xp.mean(x, axis=-1, keepdims=True)
    return c / xp.sqrt(xp.mean(c * c, axis=-1, keepdims=True) + eps)


def _input(inputs: Mapping[str, Any], name: str, shape: tuple[int, ...]) -> Any:
    if name not in inputs:
        raise KeyError(f"input {name!r} is missing; the program's inputs are {list(INPUTS)}")
    given = xp.asarray(inputs[name])
    if not xp.can_cast(given.dtype, DEVICE_DTYPE, casting="safe"):  # a wider type would be rounded, inf past 65504
        raise TypeError(
            f"input {name!r} is {given.dtype}; the program takes {xp.dtype(DEVICE_DTYPE).name} (convert it "
            "first: the module does not narrow a type for you)"
        )
    a = xp.ascontiguousarray(given, dtype=DEVICE_DTYPE)
    if tuple(a.shape) != shape:
        raise ValueError(f"input {name!r} has shape {tuple(a.shape)}; the program needs {shape}")
    return a
'''


def _host_expr(op: Op, ins: list[str]) -> str:
    """One array call (computed in float32, stored fp16) for a pre-defined kernel op."""
    k = op.kind
    f = [f"_f32({x})" for x in ins]
    if k not in PREDEFINED:
        raise CodegenError(f"kernel op {k} has no array form")
    match k:
        case OpKind.MATMUL:
            call = f"xp.matmul({f[0]}, {f[1]})"
        case OpKind.ADD:
            call = f"{f[0]} + {f[1]}"
        case OpKind.MUL:
            call = f"{f[0]} * {f[1]}"
        case OpKind.DIV:
            call = f"{f[0]} / {f[1]}"
        case OpKind.EXP:
            call = f"xp.exp({f[0]})"
        case OpKind.SQUARE:
            call = f"xp.square({f[0]})"
        case OpKind.SQRT:
            call = f"xp.sqrt({f[0]})"
        case OpKind.SILU:
            call = f"_silu({f[0]})"
        case OpKind.GELU:
            call = f"_gelu({f[0]})"
        case OpKind.GELU_ERF:
            call = f"_gelu_erf({f[0]})"
        case OpKind.RELU:
            call = f"xp.maximum({f[0]}, 0.0)"
        case OpKind.CLAMP:
            call = f"xp.clip({f[0]}, {op.float_attr('lo')!r}, {op.float_attr('hi')!r})"
        case OpKind.MUL_SCALAR:
            call = f"{f[0]} * {op.float_attr('scalar')!r}"
        case OpKind.REDUCTION:
            call = f"xp.sum({f[0]}, axis={op.int_attr('dim')}, keepdims=True)"
        case OpKind.RMS_NORM:
            call = f"_rms_norm({f[0]}, {eps_of(op)!r})" if eps_of(op) else f"_rms_norm({f[0]})"
        case OpKind.LAYER_NORM:
            call = f"_layer_norm({f[0]}, {eps_of(op)!r})"
        case OpKind.CONCAT:  # fp16 in, fp16 out: nothing to compute
            return f"xp.concatenate(({ins[0]}, {ins[1]}), axis={op.int_attr('dim')})"
        case _ as unreachable:
            assert_never(unreachable)
    return f"_f16({call})"


def _header(graph: KernelGraph, info: EmitInfo, n_kernels: int, n_calls: int) -> list[str]:
    """The module's docstring. Every piece of data in it (the program's name, the config line, which names
    a path, the layout lines) goes through `inert`: a name holding three quotes would end the docstring."""
    program = inert(info.program)
    lines = [
        f'"""{program}: a μGraph as Triton kernels, generated by mugraph (do not edit).',
        "",
        f"program: {program}",
        f"μGraph: {inert(info.digest or canonical_digest(graph))}",
        f"config: {inert(info.config)}",
        f"mugraph: {__version__}",
        f"kernels: {counted(n_kernels, 'graph-defined op')} as Triton kernels, {counted(n_calls, 'pre-defined op')} "
        "as array calls",
    ]
    if info.layouts:
        lines += [
            "layouts chosen (shape:innermost dim~swizzled dim). Device tensors between kernels take the chosen "
            "innermost dim; program inputs and outputs are row-major; shared-memory layouts and swizzles "
            "are left to Triton:",
            *[f"    {inert(x)}" for x in info.layouts],
        ]
    lines += [
        "",
        f"run(inputs) takes and returns {device_dtype(graph).value} arrays by name; kernels accumulate in",
        "float32. On a CUDA device (CuPy) Triton compiles the kernels; elsewhere, or with TRITON_INTERPRET=1,",
        "Triton's interpreter runs them on NumPy arrays (a GPU machine without CuPy runs the interpreter too).",
        "",
        "Use (the file name holds a dot, so load it by path; it needs NumPy and Triton, not mugraph):",
        "    spec = importlib.util.spec_from_file_location('kernels', 'PATH/TO/THIS.py')",
        "    kernels = importlib.util.module_from_spec(spec); spec.loader.exec_module(kernels)",
        "    outputs = kernels.run({name: array for name in kernels.INPUTS})  # shapes: kernels.INPUTS",
        f"Inputs are NumPy or CuPy arrays, or torch tensors (CPU or CUDA) of {device_dtype(graph).value} or a",
        "type it widens without loss; a wider one is refused, not rounded. Any strides. Outputs are",
        "row-major NumPy (CPU) or CuPy (GPU) arrays: torch.as_tensor takes either. Shapes are fixed.",
        '"""',
    ]
    return lines


def _launch(
    graph: KernelGraph,
    index: int,
    op: Op,
    number: int,
    sources: Sequence[str],
    info: EmitInfo,
    strides: Mapping[int, tuple[int, ...]],
    laid: Mapping[int, int],
) -> tuple[list[str], list[str]]:
    """A graph-defined op's kernel (the `number`-th) and the lines of `run` that launch it: its outputs
    (and any concat's scratch tiles) allocated, then the launch over its grid."""
    assert op.block is not None
    bg = op.block
    kname = f"kernel_{number}"
    notes = [x for x in info.layouts if x.startswith(f"block graph of op {index} ")]
    ks = emit_kernel(
        bg,
        kname,
        sources,
        [f"op {index}: graph-defined", *notes],
        [strides[i] for i in (*op.inputs, *op.outputs)],
        tf32=info.tf32,
    )
    body = [f"# op {index}: {kname}, grid {list(bg.grid)}, for-loop {bg.forloop}"]
    args = [f"t{i}" for i in op.inputs] + [f"t{o}" for o in op.outputs]
    for o in op.outputs:
        shape = graph.tensors[o].shape
        if o in laid:
            body.append(f"t{o} = _empty({shape!r}, {laid[o]})  # chosen layout: dim {laid[o]} innermost")
        else:
            body.append(f"t{o} = xp.empty({shape!r}, dtype=DEVICE_DTYPE)")
    blocks = bg.grid[0] * bg.grid[1] * bg.grid[2]
    for k, shape in enumerate(ks.scratch):
        scratch = f"scratch_{number}_{k}"
        body.append(f"{scratch} = xp.empty({(blocks, *shape)!r}, dtype=xp.float32)  # for a concat")
        args.append(scratch)
    body.append(f"{kname}[{bg.grid!r}](" + ", ".join(f"_arg({a})" for a in args) + ")")
    return ks.lines, body


EMITTED_DTYPES = (DType.FLOAT16, DType.FLOAT32)


def device_dtype(graph: KernelGraph) -> DType:
    """The one dtype of the graph's device tensors, fp16 or float32 (NumPy has no bfloat16, which the
    CPU check needs); mixed dtypes are refused."""
    found = {t.dtype for t in graph.tensors}
    dtype = found.pop() if len(found) == 1 else None
    if dtype not in EMITTED_DTYPES:
        shown = ", ".join(sorted(d.value for d in {t.dtype for t in graph.tensors}))
        raise CodegenError(f"the program's tensors are {shown}; the emitted kernels take fp16 or float32 programs")
    assert dtype is not None
    return dtype


def emit_module(graph: KernelGraph, info: EmitInfo) -> str:
    """The module's text for `graph`."""
    names: dict[int, str] = {}
    inputs: list[tuple[str, tuple[int, ...]]] = []
    dtype = device_dtype(graph)
    kernels: list[list[str]] = []
    body: list[str] = []
    outputs: list[tuple[str, str]] = []
    n_calls = 0
    live = live_tensors(graph)
    program_outputs = {t.index for t in graph.output_tensors}
    # A graph-defined op's outputs that stay inside the program take the chosen innermost dim; program
    # inputs and outputs keep the caller's row-major strides, array calls return row-major arrays.
    laid = {
        t.index: info.inner[t.index]
        for op in graph.ops_of(OpKind.CUSTOMIZED)
        for t in (graph.tensors[o] for o in op.outputs)
        if info.inner and t.index not in program_outputs and info.inner[t.index] != len(t.shape) - 1
    }
    strides = {
        t.index: layout_strides(t.shape, laid[t.index]) if t.index in laid else row_major_strides(t.shape)
        for t in graph.tensors
    }
    for index, op in enumerate(graph.ops):
        match op.kind:
            case OpKind.INPUT:
                t = graph.tensors[op.outputs[0]]
                name = str(op.attr("name"))
                names[t.index] = name
                inputs.append((name, t.shape))
                read = f"_input(inputs, {name!r}, {t.shape!r})"
                body.append(f"t{t.index} = {read}" if t.index in live else f"{read}  # read by no op")
            case OpKind.OUTPUT:
                outputs.append((str(op.attr("name")), f"t{op.inputs[0]}"))
            case _ if not any(o in live for o in op.outputs):
                body.append(f"# op {index}: {op.kind} reaches no output, not run")
            case OpKind.CUSTOMIZED:
                srcs = [names.get(i, f"t{i}") for i in op.inputs]
                kernel, lines = _launch(graph, index, op, len(kernels), srcs, info, strides, laid)
                kernels.append(kernel)
                body += lines
            case _:
                out = op.outputs[0]
                shapes = " x ".join(fmt(graph.tensors[i].shape) for i in op.inputs)
                call = _host_expr(op, [f"t{i}" for i in op.inputs])
                body.append(f"t{out} = {call}  # op {index}: {op.kind} {shapes}")
                n_calls += 1
    header = [w for x in _header(graph, info, len(kernels), n_calls) for w in wrap_text(x)]
    triton, interpret = (TRITON_IMPORT, TRITON_IMPORTED_BEFORE) if kernels else ("", "")
    prelude = PRELUDE.replace("{sys}", "import sys\n" if kernels else "").replace("{interpret}", interpret)
    prelude = prelude.replace("{triton}", triton)
    lines = prelude.replace("{dtype}", dtype.value).rstrip("\n").split("\n")
    lines += [
        "",
        "",
        f"PROGRAM = {info.program!r}",
        f"DIGEST = {(info.digest or canonical_digest(graph))!r}",
        f"INPUTS = {dict(inputs)!r}",
        f"OUTPUTS = {tuple(n for n, _ in outputs)!r}",
    ]
    for kernel in kernels:
        lines += ["", "", *kernel]
    lines += [
        "",
        "",
        "def run(inputs: Mapping[str, Any]) -> dict[str, Any]:",
        f'    """The program\'s outputs by name for {dtype.value} inputs by name (NumPy or CuPy arrays, or torch',
        '    tensors: see the module\'s docstring)."""',
    ]
    lines += [f"    {b}" for b in body]
    lines.append("    return {" + ", ".join(f"{n!r}: {t}" for n, t in outputs) + "}")
    lines += [
        "",
        "",
        'if __name__ == "__main__":  # run as a script: what it takes and gives',
        "    dtype = np.dtype(DEVICE_DTYPE).name",
        '    print(f"{PROGRAM}: run(inputs) takes {dtype} arrays {INPUTS}, gives {OUTPUTS}; on a GPU: {ON_GPU}")',
    ]
    return "\n".join(header + [w for x in lines for w in wrap_code(x)]) + "\n"


def emitted_names(source: str) -> Mapping[str, str]:
    """PROGRAM and DIGEST of an emitted module's text (read without importing it: a literal, not code)."""
    out: dict[str, str] = {}
    for line in source.splitlines():
        for key in ("PROGRAM", "DIGEST"):
            if line.startswith(f"{key} = "):
                with contextlib.suppress(ValueError, SyntaxError):
                    value = ast.literal_eval(line.split(" = ", 1)[1])
                    if isinstance(value, str):
                        out[key] = value
    return out
