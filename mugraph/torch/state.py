"""The drop-in module's parameters and buffers as its kernels need them, checked at every call and kept
whole across a pickle.

The kernels read a weight with the shape and dtype it was optimised for: a parameter replaced by one of
another shape would be read past its end (garbage, or an illegal access on a GPU), and one converted to
another dtype (`model.half()`, which the module shares) silently computes with rounded weights. So
each call compares every weight with the exported program's, and the conversions that would change a
dtype are refused before they touch anything. A pickle keeps every tensor the module holds, buffers
that `state_dict()` leaves out (non-persistent ones: rotary caches) included."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import chain

import torch

from mugraph.torch.errors import InputMismatchError, TorchError
from mugraph.torch.operands import Slot

Expected = tuple[tuple[int, ...], torch.dtype]


def expected_state(ep: torch.export.ExportedProgram, slots: Mapping[str, Slot]) -> dict[str, Expected]:
    """Each state placeholder's shape and dtype as the program was exported with them."""
    out: dict[str, Expected] = {}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and node.name in slots and isinstance(val, torch.Tensor):
            out[node.name] = (tuple(val.shape), val.dtype)
    return out


def state_names(ep: torch.export.ExportedProgram) -> dict[str, str]:
    """Each state placeholder's name in the model (`fc1.weight`)."""
    sig = ep.graph_signature
    return {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}


def read_state(
    model: str, slots: Mapping[str, Slot], expected: Mapping[str, Expected], names: Mapping[str, str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Each state placeholder's current value, refused where its shape or dtype is not the one the
    kernels were made for."""
    for ph, (owner, leaf) in slots.items():
        value = getattr(owner, leaf)
        want = expected.get(ph)
        if want is not None and (
            not isinstance(value, torch.Tensor) or value.dtype != want[1] or value.shape != want[0]
        ):
            got = f"{list(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise InputMismatchError(
                f"{model}: {names.get(ph, ph)} is {got}; this module was optimised for {list(want[0])} "
                f"{want[1]} (load weights of that shape and dtype, or optimise the changed model again)"
            )
        yield ph, value  # a tensor: checked above (a slot without an exported value holds one too)


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
