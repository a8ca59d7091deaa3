"""The drop-in module: a captured model's chosen program run as Triton kernels, with its glue in PyTorch.

Every graph-defined op of the program is its emitted Triton kernel, launched on torch tensors (compiled
on a CUDA device, in Triton's interpreter elsewhere); every pre-defined op is one torch call computing
in float32 and storing the tensor's dtype, as the kernels do; every glue op is the exported graph's own
ATen call. The order is fixed once, when the module is built: a glue value is computed just before the
first op that reads it. Glue that reads only parameters (a linear layer's transposed weight) is
computed once, then, and kept as a buffer.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import itertools
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import fx
from torch.export.graph_signature import OutputKind
from torch.utils import _pytree as pytree

from mugraph.codegen.check import require_triton
from mugraph.codegen.emit_kernel import emit_kernel
from mugraph.codegen.errors import KERNELS_EXTRA_HINT
from mugraph.ir.graph import KernelGraph, Op
from mugraph.ir.types import DType, OpKind
from mugraph.torch.capture import Captured
from mugraph.torch.errors import TorchError
from mugraph.torch.lower import InputSource

TORCH_DTYPES = {DType.FLOAT16: torch.float16, DType.BFLOAT16: torch.bfloat16, DType.FLOAT32: torch.float32}


class InputMismatchError(TorchError, ValueError):
    """The module was called with inputs of other shapes or dtypes than it was optimised for."""


@dataclass(frozen=True)
class _Step:
    """One step of the forward pass: a glue node, a program input made from torch values, or an op."""

    kind: str  # "glue" | "input" | "op"
    name: str = ""
    index: int = -1


def kernels_source(graph: KernelGraph) -> tuple[str, dict[int, tuple[str, list[tuple[int, ...]]]]]:
    """The Triton kernels of `graph`'s graph-defined ops as one module's text, and per op its kernel's
    name and the shapes of its float32 scratch tiles (one per concat)."""
    lines = ["import triton", "import triton.language as tl", ""]
    kernels: dict[int, tuple[str, list[tuple[int, ...]]]] = {}
    for index, op in enumerate(graph.ops):
        if op.kind is OpKind.CUSTOMIZED:
            assert op.block is not None
            name = f"kernel_{len(kernels)}"
            ks = emit_kernel(op.block, name, [f"t{i}" for i in op.inputs], [f"op {index}: graph-defined"])
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


def _load_kernels(source: str) -> ModuleType:
    """Import the kernels' text: compiled for the CUDA device torch uses, or, without one, in Triton's
    interpreter (chosen when this package was imported)."""
    require_triton()
    import triton.language as tl

    if not torch.cuda.is_available() and type(tl.sum).__name__ != "InterpretedFunction":
        raise TorchError("Triton was imported in this process before mugraph.torch, without TRITON_INTERPRET=1, so "
                         "its interpreter cannot run the kernels; import mugraph.torch first or set TRITON_INTERPRET=1")
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


def _host(op: Op, args: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """A pre-defined op in torch: float32 arithmetic, the result stored in the program's dtype."""
    k = op.kind
    if k is OpKind.CONCAT:
        return torch.cat(args, dim=op.int_attr("dim"))
    f = [a.float() for a in args]
    table: dict[OpKind, Callable[[], torch.Tensor]] = {
        OpKind.MATMUL: lambda: torch.matmul(f[0], f[1]),
        OpKind.ADD: lambda: f[0] + f[1],
        OpKind.MUL: lambda: f[0] * f[1],
        OpKind.DIV: lambda: f[0] / f[1],
        OpKind.EXP: lambda: torch.exp(f[0]),
        OpKind.SQUARE: lambda: f[0] * f[0],
        OpKind.SQRT: lambda: torch.sqrt(f[0]),
        OpKind.SILU: lambda: F.silu(f[0]),
        OpKind.GELU: lambda: F.gelu(f[0], approximate="tanh"),
        OpKind.GELU_ERF: lambda: F.gelu(f[0]),
        OpKind.RELU: lambda: torch.relu(f[0]),
        OpKind.CLAMP: lambda: torch.clamp(f[0], op.float_attr("lo"), op.float_attr("hi")),
        OpKind.MUL_SCALAR: lambda: f[0] * op.float_attr("scalar"),
        OpKind.REDUCTION: lambda: torch.sum(f[0], dim=op.int_attr("dim"), keepdim=True),
        OpKind.RMS_NORM: lambda: f[0] / torch.sqrt(torch.mean(f[0] * f[0], dim=-1, keepdim=True)),
    }
    return table[k]().to(dtype)


class OptimizedModule(torch.nn.Module):
    """A captured model as its optimised program: same inputs, same outputs, same structure."""

    def __init__(self, captured: Captured, program: KernelGraph, chosen: str = "") -> None:
        super().__init__()
        ep = captured.exported
        self.name = captured.name
        self.chosen = chosen  # what the program is (the μGraph digests), for repr
        self._lowering = captured.lowering
        self._program = program
        self._nodes = {n.name: n for n in ep.graph.nodes}
        self._output_node = next(n for n in ep.graph.nodes if n.op == "output")
        self._in_spec = ep.call_spec.in_spec
        self._out_spec = ep.call_spec.out_spec
        sig = ep.graph_signature
        self._output_specs = list(sig.output_specs)
        self._buffer_of = {fqn: ph for ph, fqn in sig.inputs_to_buffers.items()}
        self._user_inputs = list(sig.user_inputs)
        self._expected = {n: (tuple(self._nodes[n].meta["val"].shape), self._nodes[n].meta["val"].dtype)
                          for n in self._user_inputs if isinstance(self._nodes[n].meta.get("val"), torch.Tensor)}
        self._state: dict[str, str] = {}  # placeholder -> attribute
        for ph, fqn in sig.inputs_to_parameters.items():
            self.register_parameter(ph, torch.nn.Parameter(ep.state_dict[fqn].detach().clone(), requires_grad=False))
            self._state[ph] = ph
        for ph, fqn in sig.inputs_to_buffers.items():
            value = ep.state_dict[fqn] if fqn in ep.state_dict else ep.constants[fqn]
            self.register_buffer(ph, value.detach().clone())
            self._state[ph] = ph
        for ph, fqn in sig.inputs_to_lifted_tensor_constants.items():
            self.register_buffer(ph, ep.constants[fqn].detach().clone())
            self._state[ph] = ph
        self._out_index = {str(op.attr("name")): op.inputs[0] for op in program.ops_of(OpKind.OUTPUT)}
        self._input_names = {op.outputs[0]: str(op.attr("name")) for op in program.ops_of(OpKind.INPUT)}
        self._made_by: dict[int, list[str]] = {}  # program tensor -> the lowered nodes it is
        for name, t in self._out_index.items():
            self._made_by.setdefault(t, []).append(name)
        source, self._kernel_info = kernels_source(program)
        self._kernels = _load_kernels(source) if self._kernel_info else None
        self._steps = self._schedule()
        self._folded: dict[str, str] = {}  # program input -> buffer holding its value
        self._fold()

    # -- the schedule, fixed once -----------------------------------------------------------------
    def _schedule(self) -> list[_Step]:
        ready = set(self._user_inputs) | set(self._state)
        made: set[int] = set()
        steps: list[_Step] = []

        def need(name: str) -> None:
            stack = [name]
            while stack:
                n = stack[-1]
                if n in ready:
                    stack.pop()
                    continue
                if n in self._lowering.outputs:
                    if self._out_index[n] not in made:
                        raise TorchError(f"{self.name}: glue reads {n} before the program computes it (a bug)")
                    ready.add(n)
                    stack.pop()
                    continue
                missing = [a.name for a in self._nodes[n].all_input_nodes if a.name not in ready]
                if missing:
                    stack.extend(missing)
                    continue
                steps.append(_Step("glue", n))
                ready.add(n)
                stack.pop()

        for index, op in enumerate(self._program.ops):
            if op.kind is OpKind.INPUT or op.kind is OpKind.OUTPUT:
                continue
            for t in op.inputs:
                if t in self._input_names and t not in made:
                    src = self._lowering.inputs[self._input_names[t]]
                    if src.node is not None:
                        need(src.node)
                    steps.append(_Step("input", self._input_names[t], t))
                    made.add(t)
            steps.append(_Step("op", index=index))
            made.update(op.outputs)
        for out in self._output_node.args[0]:
            if isinstance(out, fx.Node):
                need(out.name)
        return steps

    def _fold(self) -> None:
        """Compute once the program inputs that depend on parameters only, and keep them as buffers."""
        static: dict[str, bool] = {}

        def is_static(name: str) -> bool:
            if name not in static:
                if name in self._state:
                    static[name] = True
                elif name in self._user_inputs or name in self._lowering.outputs:
                    static[name] = False
                else:
                    static[name] = all(is_static(a.name) for a in self._nodes[name].all_input_nodes)
            return static[name]

        sources = self._lowering.inputs
        folded = [s for s in self._steps
                  if s.kind == "input" and (sources[s.name].node is None or is_static(str(sources[s.name].node)))]
        if not folded:
            return
        env: dict[str, Any] = {ph: getattr(self, attr) for ph, attr in self._state.items()}
        with torch.no_grad():
            for s in folded:
                src = self._lowering.inputs[s.name]
                if src.node is not None:
                    self._glue_value(src.node, env)
                attr = f"folded_{len(self._folded)}"
                self.register_buffer(attr, self._make_input(src, env).contiguous())
                self._folded[s.name] = attr

    def _glue_value(self, name: str, env: dict[str, Any]) -> Any:
        if name not in env:
            node = self._nodes[name]
            for a in node.all_input_nodes:
                self._glue_value(a.name, env)
            args = fx.node.map_arg(node.args, lambda a: env[a.name])
            kwargs = fx.node.map_arg(node.kwargs, lambda a: env[a.name])
            env[name] = node.target(*args, **kwargs)
        return env[name]

    def _make_input(self, src: InputSource, env: dict[str, Any]) -> torch.Tensor:
        dtype = TORCH_DTYPES[src.dtype]
        if src.kind == "const":
            device = next((t.device for t in env.values() if isinstance(t, torch.Tensor)), None)
            return torch.full(src.shape, src.value, dtype=dtype, device=device)
        value = env[str(src.node)]
        if src.kind == "transpose":
            return cast("torch.Tensor", value.t().contiguous())
        if src.kind == "reshape":
            return cast("torch.Tensor", value.reshape(src.shape).contiguous())
        if src.kind == "scale":
            return cast("torch.Tensor", (value.float() * src.value).to(dtype).contiguous())
        return cast("torch.Tensor", value.contiguous())

    # -- running ----------------------------------------------------------------------------------
    def _check(self, flat: list[Any]) -> None:
        if len(flat) != len(self._user_inputs):
            raise InputMismatchError(f"{self.name}: takes {len(self._user_inputs)} input(s), got {len(flat)}")
        for name, value in zip(self._user_inputs, flat, strict=True):
            want = self._expected.get(name)
            if want is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise InputMismatchError(f"{self.name}: input {name} must be a tensor, got {type(value).__name__}")
            if (tuple(value.shape), value.dtype) != want:
                raise InputMismatchError(
                    f"{self.name}: input {name} is {list(value.shape)} {value.dtype}; this module was optimised for "
                    f"{list(want[0])} {want[1]} (shapes are fixed: optimise again for another batch size)")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        flat, _ = pytree.tree_flatten((args, kwargs))
        self._check(flat)
        env: dict[str, Any] = dict(zip(self._user_inputs, flat, strict=True))
        env.update({ph: getattr(self, attr) for ph, attr in self._state.items()})
        tensors: dict[int, torch.Tensor] = {}
        device = flat[0].device if flat and isinstance(flat[0], torch.Tensor) else None
        for step in self._steps:
            if step.kind == "glue":
                self._glue_value(step.name, env)
            elif step.kind == "input":
                if step.name in self._folded:
                    tensors[step.index] = getattr(self, self._folded[step.name])
                else:
                    tensors[step.index] = self._make_input(self._lowering.inputs[step.name], env)
                env.update(dict.fromkeys(self._made_by.get(step.index, ()), tensors[step.index]))
            else:
                for t in self._run_op(step.index, tensors, device):
                    env.update(dict.fromkeys(self._made_by.get(t, ()), tensors[t]))
        outs = [env[a.name] if isinstance(a, fx.Node) else a for a in self._output_node.args[0]]
        user: list[Any] = []
        for spec, value in zip(self._output_specs, outs, strict=True):
            if spec.kind == OutputKind.BUFFER_MUTATION:  # the model wrote to a buffer: so does this module
                getattr(self, self._buffer_of[str(spec.target)]).copy_(value)
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                flat[self._user_inputs.index(str(spec.target))].copy_(value)
            else:
                user.append(value)
        return pytree.tree_unflatten(user, self._out_spec)

    def _run_op(self, index: int, tensors: dict[int, torch.Tensor], device: torch.device | None) -> tuple[int, ...]:
        """Run op `index`; returns the tensors it made."""
        op = self._program.ops[index]
        args = [tensors[i] for i in op.inputs]
        if op.kind is not OpKind.CUSTOMIZED:
            dtype = TORCH_DTYPES[self._program.tensors[op.outputs[0]].dtype]
            tensors[op.outputs[0]] = _host(op, args, dtype).contiguous()
            return op.outputs
        assert op.block is not None and self._kernels is not None
        bg = op.block
        where = args[0].device if args else device
        outs = [torch.empty(self._program.tensors[o].shape, dtype=TORCH_DTYPES[self._program.tensors[o].dtype],
                            device=where) for o in op.outputs]
        name, scratch_shapes = self._kernel_info[index]
        blocks = math.prod(bg.grid)
        scratch = [torch.empty((blocks, *shape), dtype=torch.float32, device=where) for shape in scratch_shapes]
        getattr(self._kernels, name)[bg.grid](*[a.contiguous() for a in args], *outs, *scratch)
        for o, t in zip(op.outputs, outs, strict=True):
            tensors[o] = t
        return op.outputs

    def extra_repr(self) -> str:
        kernels = len(self._kernel_info)
        calls = sum(1 for op in self._program.ops
                    if op.kind not in (OpKind.INPUT, OpKind.OUTPUT, OpKind.CUSTOMIZED))
        return (f"name={self.name!r}, kernels={kernels}, torch_calls={calls}, glue={len(self._lowering.glue)}"
                + (f", chosen={self.chosen!r}" if self.chosen else ""))

