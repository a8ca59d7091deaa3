"""What the drop-in module gathers before it runs an op: the model's parameters and buffers, held under
the user's own names (so `state_dict()` keys match the model's and `load_state_dict` takes its state),
and the program inputs made from torch values as the lowering recorded (`InputSource`).

Nothing made from a parameter is kept: a linear layer's transposed weight is a view of the parameter
that the kernels read with its strides, so a new value (`load_state_dict`, `weight.data.copy_`, a
parameter replaced) is what the next call uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch

from mugraph.ir.graph import KernelGraph
from mugraph.ir.types import OpKind, Shape
from mugraph.torch.errors import TorchError
from mugraph.torch.kernels import TORCH_DTYPES
from mugraph.torch.lower import InputSource

CONSTANTS = "mugraph_constants"  # the submodule holding the exported program's lifted tensor constants
Slot = tuple[torch.nn.Module, str]  # where a placeholder's value lives: a (sub)module and an attribute


def _owner(root: torch.nn.Module, fqn: str) -> Slot:
    """The submodule that holds `fqn` (`fc1.weight` -> root.fc1, "weight"), made as plain modules."""
    *path, leaf = fqn.split(".")
    owner = root
    for part in path:
        child = owner._modules.get(part)
        if child is None:
            child = torch.nn.Module()
            owner.add_module(part, child)
        owner = child
    return owner, leaf


def register_state(root: torch.nn.Module, ep: torch.export.ExportedProgram, share: bool) -> dict[str, Slot]:
    """Register the exported program's parameters, buffers and constants on `root` under their names in
    the model; returns where each placeholder's value lives. `share`: hold the model's own tensors (its
    parameters are then the module's: a change to either is seen by both), else copies."""
    sig = ep.graph_signature
    slots: dict[str, Slot] = {}
    made: dict[tuple[object, ...], torch.Tensor] = {}  # one tensor per tensor of the model (tied weights)

    def value(t: torch.Tensor, kind: str) -> torch.Tensor:
        key = (kind, id(t)) if share else (kind, *_identity(t))
        if key not in made:
            v = t if share else t.detach().clone()
            if kind == "parameter" and not isinstance(v, torch.nn.Parameter):
                v = torch.nn.Parameter(v, requires_grad=False)
            made[key] = v
        return made[key]

    try:
        for ph, fqn in sig.inputs_to_parameters.items():
            owner, leaf = slots[ph] = _owner(root, fqn)
            owner.register_parameter(leaf, cast(torch.nn.Parameter, value(ep.state_dict[fqn], "parameter")))
        for ph, fqn in sig.inputs_to_buffers.items():
            owner, leaf = slots[ph] = _owner(root, fqn)
            persistent = fqn in ep.state_dict
            owner.register_buffer(
                leaf, value(ep.state_dict[fqn] if persistent else ep.constants[fqn], "buffer"), persistent=persistent
            )
        for ph, fqn in sig.inputs_to_lifted_tensor_constants.items():
            owner, leaf = slots[ph] = _owner(root, f"{CONSTANTS}.{fqn.replace('.', '_')}")
            owner.register_buffer(leaf, value(ep.constants[fqn], "constant"), persistent=False)
    except KeyError as e:  # torch's "attribute ... already exists": a name the module itself uses
        raise TorchError(f"the model's state has a name the drop-in module cannot hold: {e}") from None
    return slots


def _identity(t: torch.Tensor) -> tuple[object, ...]:
    """What makes two tensors one: the same memory read the same way. A weight tied in the model (a
    language model's embedding and output head) is one tensor under two names there, and two objects on
    one storage in an exported program read back from its file: either way, one tensor here, so an edit
    in place reaches every use, as it does in the model."""
    return (t.untyped_storage().data_ptr(), t.device, t.dtype, t.storage_offset(), tuple(t.shape), t.stride())


def kernel_strides(program: KernelGraph, sources: Mapping[str, InputSource]) -> dict[int, Shape]:
    """The strides the kernels read program inputs with where those are views, not row-major: a
    transposed weight [k, n] (a view of the [n, k] parameter) has strides (1, k)."""
    out: dict[int, Shape] = {}
    for op in program.ops_of(OpKind.INPUT):
        src = sources[str(op.attr("name"))]
        if src.kind == "transpose":
            out[op.outputs[0]] = (1, src.shape[0])
    return out


class InputMaker:
    """A program input from the torch values of the call (or the constant it is)."""

    def __init__(self, sources: Mapping[str, InputSource]) -> None:
        self.sources = sources
        self._consts: dict[tuple[str, torch.device | None], torch.Tensor] = {}

    def make(self, name: str, env: Mapping[str, Any], device: torch.device | None) -> torch.Tensor:
        src = self.sources[name]
        dtype = TORCH_DTYPES[src.dtype]
        if src.kind == "const":
            key = (name, device)
            if key not in self._consts:
                self._consts[key] = torch.full(src.shape, src.value, dtype=dtype, device=device)
            return self._consts[key]
        value = cast(torch.Tensor, env[str(src.node)])
        if src.rows is not None:  # a view: rows of a row-major value stay row-major
            value = value[src.rows[0] : src.rows[1]]
        if src.kind == "transpose":  # read in place by the kernels (see kernel_strides)
            return (value if value.dtype is dtype else value.to(dtype)).t()
        base, scaled = src.kind.removesuffix("_scale"), src.kind.endswith("scale")  # "scale": as it is, scaled
        if base == "transpose":
            value = value.t()
        elif base == "reshape":
            value = value.reshape(src.shape)
        if src.shift:
            value = value.float() + src.shift
        if scaled:
            value = value.float() * src.value
        return value.to(dtype).contiguous()
