"""The model's own forward, run on the drop-in module's tensors where its kernels cannot serve: after a
conversion to a dtype it was not optimised for, and in training mode.

nn.Module converts (or switches the mode of) its children one after another, so a refusal from inside
the optimized module would come after its siblings were converted and leave the model holding it half
converted. The module takes every conversion and mode instead, and runs what a model in that state
runs: the model's own forward (a structural copy of the model as captured, sharing its tensors, so its
mode is the module's own), called with the module's current tensors. A conversion back to the
optimised dtypes, or `eval()`, turns the kernels on again.

The module shares the model's parameters (converted in place by torch) and buffers (replaced by new
tensors), so a conversion of the module is one of the model too: the model's buffers are set to the
module's converted ones, and the model stays whole and keeps sharing them."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import torch
from torch.func import functional_call

from mugraph.torch.operands import Slot

# where a parameter or buffer lives in the model and in the module: (name in the model, model's owner,
# module's owner, attribute)
_Tied = tuple[str, torch.nn.Module, torch.nn.Module, str]


def _model_slot(model: torch.nn.Module, fqn: str) -> tuple[torch.nn.Module, str] | None:
    """The submodule of `model` holding `fqn` and the attribute's name (None where the model no longer
    has that submodule)."""
    path, _, leaf = fqn.rpartition(".")
    try:
        return (model.get_submodule(path) if path else model), leaf
    except AttributeError:
        return None


class ModelForward:
    """The captured model's forward over the module's current tensors, in the module's mode."""

    def __init__(self, model: torch.nn.Module, names: Mapping[str, str], slots: Mapping[str, Slot]) -> None:
        """`names`: the exported program's parameter and buffer placeholders with their names in the
        model; `slots`: where the module holds each placeholder's value."""
        self.model = model
        keep = {id(t): t for t in chain(model.parameters(), model.buffers())}
        # the model's modules and Python attributes as captured, its tensors shared; its mode is ours
        self.structure = copy.deepcopy(model, memo=dict(keep))
        self.structure.eval()
        self.tied: list[_Tied] = []
        for ph, fqn in names.items():
            found = _model_slot(model, fqn)
            if found is not None and ph in slots:
                owner, leaf = slots[ph]
                self.tied.append((fqn, found[0], owner, leaf))

    def train(self, mode: bool) -> None:
        self.structure.train(mode)

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        tensors = {fqn: getattr(owner, leaf) for fqn, _, owner, leaf in self.tied}
        return functional_call(self.structure, tensors, tuple(args), dict(kwargs), tie_weights=True, strict=False)

    def shared_now(self) -> list[_Tied]:
        """The tensors the model and the module hold as one object now (before a conversion)."""
        return [t for t in self.tied if _get(t[1], t[3]) is _get(t[2], t[3])]

    @staticmethod
    def share_again(shared: Sequence[_Tied]) -> None:
        """After a conversion of the module: the model holds the module's new tensors where it held the
        old ones (torch replaces a converted buffer; a parameter is converted in place, the same object)."""
        for _, model_owner, module_owner, leaf in shared:
            new = _get(module_owner, leaf)
            if new is _get(model_owner, leaf):
                continue
            if leaf in model_owner._parameters and isinstance(new, torch.nn.Parameter):
                model_owner._parameters[leaf] = new
            elif leaf in model_owner._buffers and isinstance(new, torch.Tensor):
                model_owner._buffers[leaf] = new


def _get(owner: torch.nn.Module, leaf: str) -> object:
    return owner._parameters.get(leaf, owner._buffers.get(leaf))


def model_forward(
    model: torch.nn.Module | None, names: Mapping[str, str], slots: Mapping[str, Slot]
) -> ModelForward | None:
    """The model's forward for the module, or None where there is no model (a module made from a store)
    or it cannot be copied (an object in it that deepcopy refuses)."""
    if model is None:
        return None
    try:
        return ModelForward(model, names, slots)
    except Exception:  # a model deepcopy cannot copy: its module keeps to its kernels, as a loaded one does
        return None
