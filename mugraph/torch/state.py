"""The drop-in module's parameters and buffers as its kernels need them, checked at every call and kept
whole across a pickle.

The kernels read a weight with the shape and dtype it was optimised for: a parameter replaced by one of
another shape would be read past its end (garbage, or an illegal access on a GPU), and one converted to
another dtype (`model.half()`, which the module shares) silently computes with rounded weights. So
each call compares every weight with the exported program's, and the conversions that would change a
dtype are refused before they touch anything. A pickle keeps every tensor the module holds, buffers
that `state_dict()` leaves out (non-persistent ones: rotary caches) included."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain

import torch

from mugraph.torch.errors import InputMismatchError, TorchError
from mugraph.torch.operands import Slot


class StateReader:
    """The module's state placeholders' current values at each call, refused where a value's shape or
    dtype is not the one the kernels were made for (about 0.2 μs a weight: a call's host overhead is
    tens of μs)."""

    def __init__(self, model: str, ep: torch.export.ExportedProgram, slots: Mapping[str, Slot]) -> None:
        self.model = model
        sig = ep.graph_signature
        self.names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
        vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
        self.plan: list[tuple[str, torch.nn.Module, str, torch.Size, torch.dtype]] = []
        self.unchecked: list[tuple[str, torch.nn.Module, str]] = []  # no exported value to check against
        for ph, (owner, leaf) in slots.items():
            val = vals.get(ph)
            if isinstance(val, torch.Tensor):
                self.plan.append((ph, owner, leaf, torch.Size(val.shape), val.dtype))
            else:
                self.unchecked.append((ph, owner, leaf))

    def __call__(self) -> dict[str, torch.Tensor]:
        out = {ph: getattr(owner, leaf) for ph, owner, leaf in self.unchecked}
        for ph, owner, leaf, shape, dtype in self.plan:
            value = getattr(owner, leaf)
            try:
                same = value.dtype is dtype and value.shape == shape
            except AttributeError:  # None, or something else where a tensor was
                same = False
            if not same:
                raise self._refusal(ph, value, shape, dtype)
            out[ph] = value
        return out

    def _refusal(self, ph: str, value: object, shape: torch.Size, dtype: torch.dtype) -> InputMismatchError:
        got = f"{list(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
        return InputMismatchError(
            f"{self.model}: {self.names.get(ph, ph)} is {got}; this module was optimised for {list(shape)} "
            f"{dtype} (load weights of that shape and dtype, or optimise the changed model again)"
        )


def held_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer the module holds, non-persistent buffers included, detached."""
    return {name: t.detach() for name, t in chain(module.named_parameters(), module.named_buffers())}


def restore_tensors(module: torch.nn.Module, state: Mapping[str, torch.Tensor], model: str) -> None:
    """Copy a pickled module's tensors into one made again from its store (a tensor the pickle lacks,
    from an older pickle, keeps the store's value)."""
    own = dict(chain(module.named_parameters(), module.named_buffers()))
    unknown = sorted(set(state) - set(own))
    if unknown:
        raise TorchError(
            f"{model}: the pickled module holds {', '.join(unknown[:3])}, which the model in its store does "
            "not: the store now holds another model's run; optimise the model again"
        )
    with torch.no_grad():
        for name, value in state.items():
            if own[name].shape != value.shape:
                raise TorchError(
                    f"{model}: the pickled {name} is {list(value.shape)} where the model in its store has "
                    f"{list(own[name].shape)}: the store now holds another model's run; optimise the model again"
                )
            own[name].copy_(value)


def refuse_dtype_change(module: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], model: str) -> None:
    """Refuse a conversion (`.half()`, `.to(torch.bfloat16)`, `.double()`) that would change the dtype of
    a tensor the module holds, before it changes any: the kernels were made for those dtypes, and the
    module shares the model's parameters, so the model would be converted too. A move to another device
    (same dtypes) goes through."""
    dtypes = {t.dtype for t in chain(module.parameters(), module.buffers())}
    for dtype in sorted(dtypes, key=str):
        probe = fn(torch.empty(0, dtype=dtype))
        if isinstance(probe, torch.Tensor) and probe.dtype != dtype:
            raise TorchError(
                f"{model}: an optimized module keeps the dtypes it was optimised for ({dtype} here), and "
                f"converting it to {probe.dtype} would also convert the model, whose parameters it shares; "
                "optimise a converted copy of the model instead (copy.deepcopy(model).half(), then mugraph.optimize)"
            )
