"""The drop-in module's parameters and buffers as its kernels need them, checked at every call and kept
whole across a pickle.

The kernels read a weight with the shape and dtype it was optimised for: a parameter replaced by one of
another shape would be read past its end (garbage, or an illegal access on a GPU), and one converted to
another dtype (`model.half()`, which the module shares) silently computes with rounded weights. So
each call of the kernels compares every weight with the exported program's; a conversion of the module
itself is taken whole, and says what it left (`converted`), so that the module runs the model's own
forward instead until it is converted back. A tensor only glue reads (an fp16 model's float32 rotary
table) is checked for its shape alone: torch computes with it as the model would, in whatever dtype it
has, so the dtype the module was optimised for is its kernels' (the model's compute dtype), and
`.half()` of an fp16 model holding float32 buffers keeps them on. A pickle keeps every
tensor the module holds, buffers that `state_dict()` leaves out (non-persistent ones: rotary caches)
included."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import chain

import torch

from mugraph.torch.errors import InputMismatchError, TorchError
from mugraph.torch.operands import Slot


class StateReader:
    """The module's state placeholders' current values at each call, refused where a value's shape, or
    the dtype of one the kernels read, is not the one the module was made for (about 0.2 μs a weight: a
    call's host overhead is tens of μs)."""

    def __init__(
        self,
        model: str,
        ep: torch.export.ExportedProgram,
        slots: Mapping[str, Slot],
        kernel_read: Collection[str],
    ) -> None:
        """`kernel_read`: the placeholders the program's inputs are made from (the rest only glue reads)."""
        self.model = model
        sig = ep.graph_signature
        self.names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
        vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
        # (placeholder, owner, attribute, shape, dtype, whether the kernels read it)
        self.plan: list[tuple[str, torch.nn.Module, str, torch.Size, torch.dtype, bool]] = []
        self.unchecked: list[tuple[str, torch.nn.Module, str]] = []  # no exported value to check against
        for ph, (owner, leaf) in slots.items():
            val = vals.get(ph)
            if isinstance(val, torch.Tensor):
                self.plan.append((ph, owner, leaf, torch.Size(val.shape), val.dtype, ph in kernel_read))
            else:
                self.unchecked.append((ph, owner, leaf))

    def __call__(self) -> dict[str, torch.Tensor]:
        out = {ph: getattr(owner, leaf) for ph, owner, leaf in self.unchecked}
        for ph, owner, leaf, shape, dtype, kernels in self.plan:
            value = getattr(owner, leaf)
            try:
                same = value.shape == shape and (value.dtype is dtype or not kernels)
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
            f"{dtype} (load weights of that shape and dtype, or optimise the changed model again{_also(value, shape)})"
        )


def _also(value: object, shape: torch.Size) -> str:
    """For a weight converted on the model alone (`model.half()`, whose parameters the module shares):
    converting the module too runs the model's own forward at that dtype."""
    if isinstance(value, torch.Tensor) and value.shape == shape:
        return f"; or convert the module too, to {value.dtype}, to run the model's own forward in it"
    return ""


def _every_tensor(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every name a parameter or buffer has in the module: a tied weight under each of its names."""
    params = module.named_parameters(remove_duplicate=False)
    return dict(chain(params, module.named_buffers(remove_duplicate=False)))


def held_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer the module holds, non-persistent buffers and each name of a tied
    weight included, detached."""
    return {name: t.detach() for name, t in _every_tensor(module).items()}


def restore_tensors(module: torch.nn.Module, state: Mapping[str, torch.Tensor], model: str) -> None:
    """Copy a pickled module's tensors into one made again from its store (a tensor the pickle lacks,
    from an older pickle, keeps the store's value; one of another dtype, pickled after a conversion,
    converts the new module's)."""
    own = _every_tensor(module)
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
            if own[name].dtype is value.dtype:
                own[name].copy_(value)
            else:  # pickled after a conversion: the module made again is converted the same way
                own[name].data = value.to(own[name].device)


def converted(reader: StateReader) -> str | None:
    """What a conversion (`.half()`, `.to(torch.bfloat16)`, `.double()`) of the module left in another
    dtype than the one its kernels compute in, and what to do ("its weights the kernels read are
    torch.float32 where it was optimised for torch.float16; ..."), or None where every tensor they read
    has that dtype again (a tensor only glue reads may have any: torch computes with it)."""
    changed: dict[torch.dtype, torch.dtype] = {}
    for _, owner, leaf, _, optimised, kernels in reader.plan:
        current = getattr(owner, leaf)
        if kernels and isinstance(current, torch.Tensor) and current.dtype is not optimised:
            changed.setdefault(current.dtype, optimised)
    if not changed:
        return None
    now = ", ".join(sorted(str(d) for d in changed))
    was = sorted({str(d) for d in changed.values()})
    return (
        f"the weights its kernels read are {now} where it was optimised for {', '.join(was)}; convert it "
        f"back (.to({was[0]})) to turn them back on, or optimise the model again in {now}"
    )
