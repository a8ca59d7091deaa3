"""A store's module checked once against the exported program it was made from, when `mugraph.load`
(or an unpickled module) makes it. `mugraph.optimize` checks its module against the model itself; a
store read later may come from `mugraph optimize model.py`, which checks nothing, or from a machine
whose kernels ran right where this one's may not. The example inputs are not kept with the run (torch
pickles them), so the check runs on inputs made from their shapes and dtypes: floats drawn from a
seeded normal, integers and booleans zero (a valid index for any embedding).

A program that writes to its buffers or inputs is not checked (the check would change them), nor one
whose outputs differ between two runs on the same inputs (a random op: the disagreement would say
nothing of the kernels), nor one with a non-tensor input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.export.graph_signature import ConstantArgument, InputKind
from torch.utils import _pytree as pytree

from mugraph.torch.capture import Captured
from mugraph.torch.self_check import model_outputs, output_mismatch, writes_state

GENERATED = "inputs made from the example inputs' shapes and dtypes"


@dataclass(frozen=True)
class LoadCheck:
    """What the check found: `mismatch` (what differed; None where the module agreed), or `skipped`
    (why it did not run; None where it did)."""

    mismatch: str | None = None
    skipped: str | None = None


def generated_inputs(captured: Captured) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """Positional and keyword arguments shaped as the example inputs were, the call's constants as
    captured (None where an input is neither a tensor nor a recorded constant)."""
    ep = captured.exported
    nodes = {n.name: n for n in ep.graph.nodes}
    gen = torch.Generator().manual_seed(0)
    leaves: list[Any] = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        if isinstance(spec.arg, ConstantArgument):  # a constant of the call (None, a flag): as captured
            leaves.append(spec.arg.value)
            continue
        val = nodes[spec.arg.name].meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        shape, dtype = tuple(int(d) for d in val.shape), val.dtype
        if dtype.is_floating_point:
            leaves.append(torch.randn(shape, generator=gen).to(dtype))
        else:
            leaves.append(torch.zeros(shape, dtype=dtype))
    args, kwargs = pytree.tree_unflatten(leaves, ep.call_spec.in_spec)
    return tuple(args), dict(kwargs)


def check_loaded(module: Callable[..., Any], captured: Captured) -> LoadCheck:
    """The module's outputs against the exported program's, on generated inputs, within the bounds of
    `mugraph.optimize`'s own check."""
    if writes_state(captured.exported):
        return LoadCheck(skipped="the program writes to its buffers or inputs")
    made = generated_inputs(captured)
    if made is None:
        return LoadCheck(skipped="an input is not a tensor")
    args, kwargs = made
    program = captured.exported.module()
    try:
        want = model_outputs(lambda *a: program(*a, **kwargs), args)
    except Exception as e:  # the model's own program refuses these inputs (a value it checks)
        return LoadCheck(skipped=f"the model's program fails on generated inputs ({str(e).splitlines()[0][:120]})")
    if output_mismatch(lambda *a: program(*a, **kwargs), want, args) is not None:
        return LoadCheck(skipped="the model's outputs differ from one call to the next")
    return LoadCheck(mismatch=output_mismatch(lambda *a: module(*a, **kwargs), want, args))
