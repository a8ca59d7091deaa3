"""How a call reaches an optimized module: its arguments bound as the model binds them, and torch's
tracers told apart from a call (a trace of the module's Triton kernels would record empty outputs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.utils import _pytree as pytree

from mugraph.ir.plural import counted, noun
from mugraph.torch.errors import InputMismatchError, TracingError

_F = TypeVar("_F", bound=Callable[..., Any])
_is_tracing = cast(Callable[[], bool], torch.jit.is_tracing)  # type: ignore[attr-defined]
_compiler_disable = cast(Callable[[_F], _F], torch.compiler.disable)


def not_compiled(fn: _F) -> _F:
    """`fn` called as it is by torch.compile of a model holding it (0.4 μs a call in eager mode)."""
    return _compiler_disable(fn)


def _children(spec: pytree.TreeSpec) -> list[pytree.TreeSpec]:
    """A tree spec's children: `children()` where torch has it (its `children_specs` attribute warns of
    its deprecation there, an error in a host running under `-W error`), the attribute before."""
    children = getattr(spec, "children", None)
    return list(children() if callable(children) else spec.children_specs)


def input_names(spec: pytree.TreeSpec, placeholders: Sequence[str]) -> list[str] | None:
    """The names a call's inputs are bound by where each is one tensor of its own: the positional ones
    by their placeholders (the forward's parameter names), the keyword ones by their keys; None where
    an input is a structure (a tuple of tensors), whose call is flattened as the example's was."""
    if spec.num_children != 2:
        return None
    args, kwargs = _children(spec)
    if not all(c.is_leaf() for c in (*_children(args), *_children(kwargs))):
        return None
    if args.num_children + kwargs.num_children != len(placeholders):
        return None
    return [*placeholders[: args.num_children], *map(str, kwargs.context or [])]


def flattened(name: str, spec: pytree.TreeSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
    """A call's inputs flattened as the example call's were: its keywords in the example's order (not
    the call's), refused where a keyword is unknown or missing or the nesting differs."""
    keys = [str(k) for k in (_children(spec)[1].context or [])] if spec.num_children == 2 else []
    unknown = {k: v for k, v in kwargs.items() if k not in keys}
    if unknown:
        raise InputMismatchError(unknown_keywords(name, unknown))
    missing = [k for k in keys if k not in kwargs]
    if missing:
        raise InputMismatchError(
            f"{name}: {noun(len(missing), 'keyword argument')} {', '.join(map(repr, missing))} missing: "
            "the module was optimised for a call that passes it by name"
        )
    flat, got = pytree.tree_flatten((args, {k: kwargs[k] for k in keys}))
    if got != spec:
        raise InputMismatchError(
            f"{name}: called as {pytree.treespec_pprint(got)}, where the module was optimised for "
            f"{pytree.treespec_pprint(spec)} (* a tensor): the same arguments, nested as in the example call"
        )
    return flat


def not_traced(name: str, flat: Sequence[Any]) -> None:
    """Refuse torch's tracers: its kernels are Triton calls on data pointers, which torch.jit.trace
    would record as empty tensors (a module giving uninitialised outputs) and torch.export (also
    mugraph.optimize's capture of a model holding the module) cannot read. Both are told apart by
    what this call is given (jit's tracing state is the thread's own; export's flag is the process's,
    and a module serving in another thread meanwhile must run)."""
    if _is_tracing() or any(isinstance(v, FakeTensor | FunctionalTensor) for v in flat):
        raise TracingError(
            f"{name}: an optimized module runs Triton kernels that torch.jit.trace and torch.export cannot "
            "follow, nor mugraph.optimize's capture of a model holding it; trace, export or optimise the "
            "model itself (torch.compile of a model holding this module runs it as it is)"
        )


def unknown_keywords(name: str, kwargs: Mapping[str, Any]) -> str:
    return (
        f"{name}: {noun(len(kwargs), 'keyword argument')} {', '.join(map(repr, kwargs))} "
        f"{noun(len(kwargs), 'was', 'were')} not in the example "
        "inputs it was optimised for: the forward was captured with "
        f"{noun(len(kwargs), 'its default', 'their defaults')}, which {noun(len(kwargs), 'is', 'are')} part "
        "of the module. Call it without "
        f"{noun(len(kwargs), 'it', 'them')}; for a tensor, optimise again with it in example_kwargs; "
        "for another value (a flag, a scale), optimise a small wrapper module whose forward passes it"
    )


def bound(name: str, names: Sequence[str], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
    """The inputs of a call to a model whose inputs `names` are tensors each, in the capture's order: the
    positional ones first, each keyword by its name (`f(b=B, a=A)` once ran as `f(B, A)`)."""
    if len(args) > len(names):
        raise InputMismatchError(f"{name}: takes {counted(len(names), 'input')}, got {len(args)}")
    given = dict(zip(names, args, strict=False))
    unknown = {k: v for k, v in kwargs.items() if k not in names}
    if unknown:
        raise InputMismatchError(unknown_keywords(name, unknown))
    twice = [k for k in kwargs if k in given]
    if twice:
        raise InputMismatchError(f"{name}: {noun(len(twice), 'input')} {', '.join(map(repr, twice))} given twice")
    given.update(kwargs)
    missing = [n for n in names if n not in given]
    if missing:
        raise InputMismatchError(f"{name}: {noun(len(missing), 'input')} {', '.join(map(repr, missing))} missing")
    for key, value in given.items():
        if not isinstance(value, torch.Tensor):
            raise InputMismatchError(
                f"{name}: input {key!r} is a {type(value).__name__}; the model takes a tensor there"
            )
    return [given[n] for n in names]


def check_inputs(
    name: str,
    names: Sequence[str],
    expected: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
    flat: Sequence[Any],
) -> None:
    """Refuse a call whose inputs (`flat`, in the capture's order `names`) are not the shapes and
    dtypes the module was optimised for (`expected`), naming the input and what differs."""
    if len(flat) != len(names):
        raise InputMismatchError(
            f"{name}: takes {counted(len(names), 'input')} ({', '.join(names)}), got {len(flat)}: every input "
            "of the example call is required (an optional one given there is part of the call captured)"
        )
    for key, value in zip(names, flat, strict=True):
        want = expected.get(key)
        if want is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise InputMismatchError(f"{name}: input {key} must be a tensor, got {type(value).__name__}")
        if (tuple(value.shape), value.dtype) != want:
            again = f", or optimise again for {value.dtype}" if value.dtype.is_floating_point else ""
            fix = f"pass {want[1]}{again}" if tuple(value.shape) == want[0] else _shape_fix(value.shape, want[0])
            raise InputMismatchError(
                f"{name}: input {key} is {list(value.shape)} {value.dtype}; this module was optimised "
                f"for {list(want[0])} {want[1]} ({fix})"
            )


def _shape_fix(got: torch.Size, want: tuple[int, ...]) -> str:
    """What to do about an input of another shape than the example's: the dims that differ named (a
    KV cache grows along its sequence dim, not its batch)."""
    if len(got) != len(want):
        return f"{len(got)} dims where it was {len(want)}; shapes are fixed: optimise again for this shape"
    dims = [f"dim {d} is {g}, not {w}" for d, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    return f"{'; '.join(dims)}; shapes are fixed: optimise again for this shape (a growing KV cache: docs/torch.md)"
