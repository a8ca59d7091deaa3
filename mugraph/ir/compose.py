"""Inlining one kernel graph into another, binding inputs and outputs by name.

The source graph is replayed from its canonical JSON through `serialize.replay`, the code that
loads stored graphs, so graph-defined ops and their block graphs are rebuilt by the same builder
calls and every validity rule is checked again in the destination.
"""

from __future__ import annotations

from collections.abc import Mapping

from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph, Tensor
from mugraph.ir.serialize import Fields, replay, to_json
from mugraph.ir.shapes import fmt


class CompositionError(MugraphError, ValueError):
    """A graph does not fit where it is inlined: its input names, shapes or dtypes, or its outputs."""


def _str_field(f: Fields, key: str) -> str:
    return str(f.get(key, lambda v: isinstance(v, str) and bool(v), "a name"))


def _check_inputs(dst: KernelGraph, src: KernelGraph, inputs: Mapping[str, Tensor], label: str) -> None:
    sig = src.input_signature()
    names = [n for n, _, _ in sig]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CompositionError(f"{label}: input names {twice} occur more than once; inputs bind by name")
    missing = [n for n in names if n not in inputs]
    extra = sorted(set(inputs) - set(names))
    if missing or extra:
        raise CompositionError(
            f"{label}: the graph's inputs are {names}, but the tensors given are for "
            f"{sorted(inputs)} (missing {missing}, unknown {extra})"
        )
    for name, shape, dtype in sig:
        t = inputs[name]
        if not (t.index < len(dst.tensors) and dst.tensors[t.index] == t):
            raise CompositionError(f"{label}: the tensor given for input {name!r} is not in the destination graph")
        if (t.shape, t.dtype) != (shape, dtype):
            raise CompositionError(
                f"{label}: input {name!r} is {fmt(shape)} {dtype}, but the tensor given for it is "
                f"{fmt(t.shape)} {t.dtype}"
            )


def inline(dst: KernelGraph, src: KernelGraph, inputs: Mapping[str, Tensor], label: str = "graph") -> dict[str, Tensor]:
    """Add `src`'s ops to `dst`, reading `inputs[name]` for each input of `src`; return the
    tensors of `src`'s outputs by name. `label` names `src` in error messages."""
    _check_inputs(dst, src, inputs, label)
    outs: dict[str, Tensor] = {}

    def bind_output(f: Fields, t: Tensor) -> None:
        name = _str_field(f, "name")
        if name in outs:
            raise CompositionError(f"{label}: output name {name!r} occurs more than once; outputs bind by name")
        outs[name] = t

    replay(dst, to_json(src)["ops"], label, lambda f: inputs[_str_field(f, "name")], bind_output, strict=False)
    return outs
