"""The drop-in module: a captured model's chosen program run as Triton kernels, with its glue in PyTorch.

Every op of the program runs as `kernels` says (a graph-defined op as its emitted kernel, a pre-defined
one as a torch call); every glue op is the exported graph's own ATen call; every program input is made
from the call's torch values as `operands` says. The order is fixed once, when the module is built: a
glue value is computed just before the first op that reads it. Parameters are read at every call, so
the module always computes with their current values.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self, SupportsIndex, assert_never, cast

import torch
from torch import fx
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind
from torch.utils import _pytree as pytree

from mugraph.ir.families import BOUNDARY
from mugraph.ir.graph import KernelGraph
from mugraph.ir.plural import counted
from mugraph.ir.types import OpKind
from mugraph.torch.calls import CallBinder, check_inputs, not_compiled, not_traced
from mugraph.torch.capture import Captured
from mugraph.torch.errors import InputMismatchError as InputMismatchError  # where the docs named it first
from mugraph.torch.errors import TorchError, TrainingModeError
from mugraph.torch.flatten import VIEWS
from mugraph.torch.kernels import Launcher
from mugraph.torch.load_check import LoadCheck
from mugraph.torch.operands import InputMaker, Slot, kernel_strides, register_state
from mugraph.torch.reference import ModelForward, model_forward
from mugraph.torch.state import StateReader, converted, held_tensors, restore_tensors
from mugraph.torch.verdict import Verdict, glue_ops, heavy_glue

# The values of one forward pass by fx node name: what torch computed for the node (a tensor, a
# scalar, a tuple of them: an fx argument), read where a glue op, a program input or the outputs need it.
Values = dict[str, fx.node.Argument]


_WARNED: set[tuple[str, str]] = set()

# Why training mode runs the model's own forward: the kernels compute the eval-mode one.
TRAINING = (
    "it is in training mode, where its kernels (the model's eval-mode forward) compute otherwise; "
    "eval() turns them back on"
)

# An input that requires grad is a sign of training, and the outputs, made by inference kernels, are
# cut from autograd (backward() would fail far from here).
NO_BACKWARD = (
    "an input requires grad, but the optimised module is for inference: its outputs do not require grad "
    "and no gradient flows through it; train with the model itself"
)
# Autocast changes the dtypes torch's own ops compute in; the kernels keep those they were made for.
AUTOCAST = (
    "torch.autocast does not apply to an optimised module: it computes in the dtypes it was optimised "
    "for, where the model under autocast would compute in the autocast dtype; optimise a model converted "
    "to that dtype instead"
)


def _once(model: str, text: str) -> None:
    """Warn once per model and kind, at the user's line that called the module."""
    if (model, text) in _WARNED:
        return
    _WARNED.add((model, text))
    warnings.warn(f"{model}: {text}", stacklevel=_callers_level())


_LIBRARIES = (str(Path(torch.__file__).parent), str(Path(__file__).parents[1]))  # torch's and mugraph's files


def _callers_level() -> int:
    """The `stacklevel` of the first frame outside torch and mugraph: the user's line that called the
    module (through nn.Module's call wrappers, however many torch adds)."""
    frame, level = sys._getframe(2), 2  # the frame that called warnings.warn's caller
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame, level = frame.f_back, level + 1
    return level


@dataclass(frozen=True)
class _Step:
    """One step of the forward pass: a glue node, a program input made from torch values, or an op."""

    kind: Literal["glue", "input", "op"]
    name: str = ""
    index: int = -1


# Glue ops run as another op that gives the same values on any strides: the program hands glue its
# values contiguous, where the model's own tensors may have kept a permuted layout that `view` needed.
GLUE_AS = dict.fromkeys(VIEWS, torch.ops.aten.reshape.default)


class OptimizedModule(torch.nn.Module):
    """A captured model as its optimised program, for inference: called as the model is (same inputs,
    same outputs, same structure), with the model's parameters and buffers under the model's names.

    `share`: hold the model's own parameter and buffer tensors (what `mugraph.optimize` does, so a
    change to the model's weights is seen here too), else copies (what `mugraph.load` does, from the
    exported program saved with the run).

    `verdict` says what the search got (`mugraph.optimize` and `mugraph.load` set it): per fragment the
    μGraph chosen and its estimated speedup, or the reference kept and why."""

    store_path: Path | None  # the run store it was made from (absolute), where there is one
    store_loader: Callable[[Path], OptimizedModule] | None  # what makes it again from that store

    def __init__(self, captured: Captured, program: KernelGraph, chosen: str = "", share: bool = False) -> None:
        super().__init__()
        self.training = False  # what it computes: the model's forward as captured, in eval mode
        ep = captured.exported
        self._verdict: Verdict | None = None
        self.store_path = None
        self.store_loader = None
        self.heavy_glue = heavy_glue(captured)  # heavy ops torch runs as written (never searched)
        self.glue_ops = glue_ops(captured)  # every op torch runs as written, by name (the verdict's `glue`)
        self._model_name = captured.name
        self._chosen = chosen  # what the program is (the μGraph digests), for repr
        self.load_check: LoadCheck | None = None  # what `mugraph.load` found checking it, where it made it
        self._lowering = captured.lowering
        self._program = program
        self._nodes = {n.name: n for n in ep.graph.nodes}
        self._output_node = next(n for n in ep.graph.nodes if n.op == "output")
        self._out_spec = ep.call_spec.out_spec
        sig = ep.graph_signature
        self._output_specs = list(sig.output_specs)
        self._buffer_of = {fqn: ph for ph, fqn in sig.inputs_to_buffers.items()}
        user = [s.arg for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
        self._user_inputs = [a.name for a in user]  # placeholders, a constant of the call's too
        constants = {i: a.value for i, a in enumerate(user) if isinstance(a, ConstantArgument)}
        forward = captured.forward  # its parameters and their defaults (kept in the store's exported file)
        self._binder = CallBinder(captured.name, ep.call_spec.in_spec, self._user_inputs, constants, forward)
        self._expected = {
            n: (tuple(self._nodes[n].meta["val"].shape), self._nodes[n].meta["val"].dtype)
            for n in self._user_inputs
            if isinstance(self._nodes[n].meta.get("val"), torch.Tensor)
        }
        self._slots: dict[str, Slot] = register_state(self, ep, share)
        read = {src.node for src in self._lowering.inputs.values() if src.node is not None}
        self._state = StateReader(captured.name, ep, self._slots, read)
        self._converted: str | None = None  # what a conversion left in a dtype the kernels were not made for
        tied = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        self._model_forward = model_forward(captured.model if share else None, tied, self._slots)
        self.model_digest: str | None = None  # the store's identity's, where there is a store
        self._out_index = {str(op.attr("name")): op.inputs[0] for op in program.ops_of(OpKind.OUTPUT)}
        self._input_names = {op.outputs[0]: str(op.attr("name")) for op in program.ops_of(OpKind.INPUT)}
        self._made_by: dict[int, list[str]] = {}  # program tensor -> the lowered nodes it is
        for name, t in self._out_index.items():
            self._made_by.setdefault(t, []).append(name)
        self._launcher = Launcher(program, kernel_strides(program, self._lowering.inputs))
        self._inputs = InputMaker(self._lowering.inputs)
        self._steps = self._schedule()

    @property
    def chosen(self) -> str:
        """The μGraphs it runs, per fragment ("f0=70d7a7612ba0, ..."), or "reference"."""
        return self._chosen

    @property
    def verdict(self) -> Verdict:
        """What the search got; every module `mugraph.optimize` or `mugraph.load` returns has one (one
        made directly has none: an AttributeError, so `hasattr` and torch's introspection see it absent)."""
        if self._verdict is None:
            raise AttributeError(f"{self._model_name}: a module made directly, not by mugraph.optimize or load")
        return self._verdict

    @verdict.setter
    def verdict(self, value: Verdict) -> None:
        self._verdict = value

    def train(self, mode: bool = True) -> Self:
        """Either mode, as a model holding it sets it: its kernels compute the model's forward as
        captured in eval mode (batch norm from running statistics, no dropout), so in training mode the
        model's own forward runs instead (`kernels_off`), until `eval()`."""
        super().train(mode)
        if self._model_forward is not None:
            self._model_forward.train(mode)
        return self

    @property
    def kernels_off(self) -> str | None:
        """Why a call runs the model's own forward rather than the kernels (training mode, or a conversion
        to a dtype they were not made for), with what turns them back on; None while they run."""
        why = []
        if self.training:
            why.append(TRAINING)
        if self._converted is not None:
            why.append(self._converted)
        return "; ".join(why) or None

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        """Pickled (`torch.save`, `copy.deepcopy`) as its run's store and its current weights: the
        kernels and the exported program are the store's, made again by `mugraph.load` on the way
        back (on a machine that can read the store)."""
        store, loader = self.store_path, self.store_loader
        if (store is None or loader is None) and self._verdict is not None and self._verdict.self_check is not None:
            raise TypeError(
                f"{self._model_name}: this module runs the model's own program (its check beside the model "
                "failed), so it is no run's module and cannot be pickled; pickle the model itself"
            )
        if store is None or loader is None:
            raise TypeError(
                f"{self._model_name}: an optimized module without a run store cannot be pickled; save "
                "its state_dict() and the store's path, and use mugraph.load(store)"
            )
        state = held_tensors(self)
        return (_restored, (loader, str(store), state, self._verdict, self.model_digest, self.training))

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> Self:
        """`.to(device)` moves it, `.half()` or `.to(torch.bfloat16)` converts it, whole, as a model
        holding it converts its children one after another: the model too, whose tensors it shares. A
        dtype the kernels were not made for turns them off (`kernels_off`) until a conversion back."""
        shared = self._model_forward.shared_now() if self._model_forward is not None else []
        out = cast(Self, super()._apply(fn, recurse))  # type: ignore[no-untyped-call]
        ModelForward.share_again(shared)
        self._converted = converted(self._state)
        return out

    @property
    def model_name(self) -> str:
        """The program's name (the model's class or function name, or the name it was given)."""
        return self._model_name

    @property
    def program(self) -> KernelGraph:
        """The program this module runs: its chosen μGraphs stitched together."""
        return self._program

    def describe(self) -> str:
        """What runs where, as text: the lowered nodes and the glue (by fx node name), the program's ops,
        then the verdict (each fragment's outcome, the notes, the store and report)."""
        ops = [op.kind.value for op in self._program.ops if op.kind not in BOUNDARY]
        legend = ", customized = one Triton kernel" if OpKind.CUSTOMIZED.value in ops else ""
        lines = [*self._lowering.describe(), f"program ({counted(len(ops), 'op')}{legend}): " + ", ".join(ops)]
        if self.kernels_off is not None:
            lines.append(f"kernels off, the model's own forward runs: {self.kernels_off}")
        if self._verdict is not None:
            lines += ["verdict:", *(f"  {line}" for line in self._verdict.lines())]
        return "\n".join(lines)

    # -- the schedule, fixed once -----------------------------------------------------------------
    def _schedule(self) -> list[_Step]:
        ready = set(self._user_inputs) | set(self._slots)
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
                    t = self._out_index[n]
                    if t not in made and t in self._input_names:  # an output that is an input (an identity μGraph)
                        src = self._lowering.inputs[self._input_names[t]]
                        if src.node is not None and src.node not in ready:
                            stack.append(src.node)
                            continue
                        steps.append(_Step("input", self._input_names[t], t))
                        made.add(t)
                    if t not in made:
                        raise TorchError(f"{self._model_name}: glue reads {n} before the program computes it (a bug)")
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

    def _glue_value(self, name: str, env: Values) -> fx.node.Argument:
        if name not in env:
            node = self._nodes[name]
            for a in node.all_input_nodes:
                self._glue_value(a.name, env)
            args = fx.node.map_arg(node.args, lambda a: env[a.name])
            kwargs = fx.node.map_arg(node.kwargs, lambda a: env[a.name])
            env[name] = GLUE_AS.get(node.target, node.target)(*args, **kwargs)
        return env[name]

    # -- running ----------------------------------------------------------------------------------
    @not_compiled
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.training or self._converted is not None:
            return self._model_call(args, kwargs)
        flat = self._binder(args, kwargs)  # bound as the model binds them, flattened as the example call was
        not_traced(self._model_name, flat)
        check_inputs(self._model_name, self._user_inputs, self._expected, flat)
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in flat):
            _once(self._model_name, NO_BACKWARD)
        first = flat[0] if flat else None
        if torch.is_autocast_enabled(first.device.type if isinstance(first, torch.Tensor) else "cpu"):
            _once(self._model_name, AUTOCAST)
        with torch.no_grad():  # an inference module: the kernels have no backward
            return self._run(flat)

    def _model_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The model's own forward, on the module's tensors, in its mode (see `kernels_off`)."""
        why = self.kernels_off
        if self._model_forward is None:
            error = TrainingModeError if self.training else TorchError
            raise error(
                f"{self._model_name}: {why}; this module holds no model to run instead (made by mugraph.load "
                "or unpickled, or around a model that copy.deepcopy refuses): set it back, or optimise the "
                "model in that mode or dtype"
            )
        _once(self._model_name, f"the kernels are off, the model's own forward runs: {why}")
        return self._model_forward(args, kwargs)

    def _run(self, flat: list[Any]) -> Any:
        env: Values = dict(zip(self._user_inputs, flat, strict=True))
        env.update(self._state())
        tensors: dict[int, torch.Tensor] = {}
        device = next((v.device for v in env.values() if isinstance(v, torch.Tensor)), None)
        for step in self._steps:
            match step.kind:
                case "glue":
                    self._glue_value(step.name, env)
                case "input":
                    tensors[step.index] = self._inputs.make(step.name, env, device)
                    self._leave(step.index, tensors, env)
                case "op":
                    for t in self._launcher.run(step.index, tensors, device):
                        self._leave(t, tensors, env)
                case _ as unreachable:
                    assert_never(unreachable)
        outs = [env[a.name] if isinstance(a, fx.Node) else a for a in self._output_node.args[0]]
        user: list[Any] = []
        for spec, value in zip(self._output_specs, outs, strict=True):
            if spec.kind == OutputKind.BUFFER_MUTATION:  # the model wrote to a buffer: so does this module
                owner, leaf = self._slots[self._buffer_of[str(spec.target)]]
                getattr(owner, leaf).copy_(value)
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                flat[self._user_inputs.index(str(spec.target))].copy_(value)
            else:
                user.append(value)
        return pytree.tree_unflatten(user, self._out_spec)

    def _leave(self, t: int, tensors: dict[int, torch.Tensor], env: Values) -> None:
        """Program tensor `t` as the torch values it is: in their shapes (a value the program holds on
        its 2-d form, [B·S, D], is [B, S, D] in torch)."""
        for name in self._made_by.get(t, ()):
            shape = self._nodes[name].meta["val"].shape
            env[name] = tensors[t] if tensors[t].shape == shape else tensors[t].reshape(shape)

    def extra_repr(self) -> str:
        return (
            f"name={self._model_name!r}, kernels={self._launcher.kernels}, torch_calls={self._launcher.torch_calls}, "
            f"glue={len(self._lowering.glue)}"
            + (f", chosen={self._chosen!r}" if self._chosen else "")
            + (f", verdict={self._verdict.summary()!r}" if self._verdict is not None else "")
            + (f", kernels_off={self.kernels_off!r}" if self.kernels_off is not None else "")
        )


def _restored(
    loader: Callable[[Path], OptimizedModule],
    store: str,
    state: dict[str, torch.Tensor],
    verdict: Verdict | None,
    model_digest: str | None = None,
    training: bool = False,
) -> OptimizedModule:
    """An unpickled optimized module: its store loaded again, with every tensor and the verdict it had
    when pickled; refused where the store now holds another model's run (`fresh` made it again)."""
    module = loader(Path(store))
    if model_digest != module.model_digest:
        pickled = verdict.program if verdict is not None else module.model_name
        raise TorchError(
            f"{pickled}: {store} now holds the run of another model than the pickled module's "
            "(made again with fresh=True, or by another version of mugraph); optimise the model again"
        )
    restore_tensors(module, state, module.model_name)
    module._converted = converted(module._state)
    module.train(training)
    module._verdict = verdict if verdict is None else verdict.after_load(module.load_check)
    return module
