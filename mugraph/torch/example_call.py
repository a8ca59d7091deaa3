"""The example call a model is captured at, checked before torch.export sees it: its positional and
keyword inputs (tensors, tuples of them, or constants of the call for optional parameters), the
module's mode, and whether its forward can take the call at all; each refusal says what to pass."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from mugraph.ir.plural import counted, noun
from mugraph.torch.calls import is_cache
from mugraph.torch.errors import CaptureError, TrainingModeError


def check_eval_mode(module: torch.nn.Module, name: str) -> None:
    """Refuse a module in training mode: captured in eval mode it would compute something else (dropout
    off, batch norm on running statistics) and the returned module would differ from the model as the
    user holds it; switching it quietly hides that, so the user decides."""
    # submodules by path and class ("0 (Linear)": a Sequential's children are numbers)
    training = [
        f"{sub} ({type(m).__name__})" if sub else "the model itself" for sub, m in module.named_modules() if m.training
    ]
    if training:
        shown = ", ".join(training[:3]) + (f" and {len(training) - 3} more" if len(training) > 3 else "")
        what = f"{name} is in training mode" if module.training else f"{name} has submodules in training mode"
        raise TrainingModeError(
            f"{what}; call model.eval() first (mugraph optimises inference, where dropout "
            f"and batch norm compute otherwise; in training mode: {shown})"
        )


def example_args(example_inputs: Any) -> tuple[Any, ...]:
    """The model's positional arguments: `example_inputs` as a tuple (a lone tensor is one argument)."""
    return tuple(example_inputs) if isinstance(example_inputs, Sequence) else (example_inputs,)


def example_keywords(example_kwargs: Mapping[str, Any] | None, module: torch.nn.Module | None = None) -> dict[str, Any]:
    """The model's keyword arguments: `example_kwargs` as a dict of names to tensors (or tuples and
    lists of them, as a Hugging Face layer's `position_embeddings=(cos, sin)`), or to constants of the
    call (None, a flag, a number: `use_cache=False`), captured as they are and taken by the module
    where a call passes the same value or none. A flag or a number is for an optional argument (one with a
    default in `module`'s forward, or taken by its `**kwargs`): a required one is the call's input, a
    tensor or None (a Hugging Face model passes `alibi=None` to a Falcon layer, whose forward has no
    default for it)."""
    if example_kwargs is None:
        return {}
    if not isinstance(example_kwargs, Mapping) or not all(isinstance(k, str) for k in example_kwargs):
        raise CaptureError(
            f"example_kwargs must be a mapping of argument names to tensors, got {type(example_kwargs).__name__}"
        )
    required = _required(module) if module is not None else set()
    for key, value in example_kwargs.items():
        leaves = pytree.tree_leaves(value)
        if any(is_cache(leaf) for leaf in leaves):
            raise CaptureError(
                f"example_kwargs[{key!r}] is a {type(value).__name__}, a KV cache: a cache object cannot be "
                "captured (the module computes without one); leave it out and pass use_cache=False "
                "(example_kwargs={'use_cache': False}, or config.use_cache = False)"
            )
        tensors = all(isinstance(leaf, torch.Tensor) for leaf in leaves) and bool(leaves)
        constants = all(isinstance(leaf, torch.Tensor | None | bool | int | float) for leaf in leaves)
        if not tensors and value is not None and (not constants or key in required):
            advice = (
                f"{key} has no default in the forward: pass a tensor or None"
                if key in required
                else "another value cannot be captured: leave it out to use the forward's default"
            )
            raise CaptureError(
                f"example_kwargs[{key!r}] must be a tensor (or a tuple or list of tensors), None, or for an "
                f"optional argument a flag or a number; got {type(value).__name__} ({advice}, or optimise a "
                "small wrapper module whose forward passes it)"
            )
    return dict(example_kwargs)


def check_positional(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
    """Each positional example input a tensor (or a tuple of them), None (a Hugging Face model passes its
    layers None by position, `block(h, None, None, mask)`, for parameters with a default or without, as
    Whisper's encoder layer's `attention_mask`), or a flag or a number for an optional parameter."""
    optional = _optional_positions(module)
    for i, a in enumerate(args):
        leaves = pytree.tree_leaves(a)
        if a is None or (leaves and all(isinstance(leaf, torch.Tensor) for leaf in leaves)):
            continue
        if i in optional and all(isinstance(leaf, torch.Tensor | None | bool | int | float) for leaf in leaves):
            continue
        kinds = ", ".join(type(a).__name__ for a in args)
        raise CaptureError(
            f"example_inputs must be tensors (a tensor or a tuple of them), None, or a flag or a number for "
            f"an optional argument, got ({kinds}): input {i + 1} is a {type(a).__name__}"
            + ("" if i in optional else " where the forward has no default")
        )


def _parameters(module: torch.nn.Module) -> list[inspect.Parameter]:
    """The forward's parameters; none where its signature cannot be read (a builtin, a C extension)."""
    try:
        return list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return []


def _optional_positions(module: torch.nn.Module) -> set[int]:
    """The positions of the forward's parameters that have a default."""
    params = _parameters(module)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    return {i for i, p in enumerate(positional) if p.default is not inspect.Parameter.empty}


def _required(module: torch.nn.Module) -> set[str]:
    """The forward's parameters without a default: what a call must pass."""
    params = _parameters(module)
    varying = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {p.name for p in params if p.default is inspect.Parameter.empty and p.kind not in varying}


def keyword_tensors(kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The tensors of the example keyword arguments (those of their tuples too)."""
    return [leaf for leaf in pytree.tree_leaves(dict(kwargs)) if isinstance(leaf, torch.Tensor)]


def check_binds(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], name: str) -> None:
    """A forward that cannot take the example call (needs an argument neither gives, a keyword-only
    tensor passed by position, takes fewer) is said so here, where torch.export would fail inside
    `inspect`."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        keywords = f" and {noun(len(kwargs), 'keyword')} {', '.join(kwargs)}" if kwargs else ""
        raise CaptureError(
            f"{name}.forward cannot take the example inputs ({counted(len(args), 'tensor')}, passed by "
            f"position{keywords}): {e}; example_inputs are the positional arguments of one call, "
            "example_kwargs its keyword arguments (a keyword-only tensor goes there; one left out keeps its default)"
        ) from None
