"""How a call reaches an optimized module: its arguments bound as the model binds them, and torch's
tracers told apart from a call (a trace of the module's Triton kernels would record empty outputs)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
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


def unknown_keywords(name: str, kwargs: Mapping[str, Any], params: Sequence[str]) -> str:
    """Keywords the model's forward has no parameter for (and no **kwargs): the model would refuse them too."""
    takes = f"takes {', '.join(params)}" if params else "takes no named argument"
    return (
        f"{name}: {noun(len(kwargs), 'keyword argument')} {', '.join(map(repr, kwargs))} "
        f"{noun(len(kwargs), 'is not a parameter', 'are not parameters')} of its forward (which {takes}), "
        "so the model would refuse the call too: call the module as the model is called"
    )


_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class _Param:
    """One parameter of the forward, as a call binds it."""

    name: str
    positional: bool
    keyword: bool
    default: Any = _EMPTY


@dataclass(frozen=True)
class _Params:
    positional: tuple[_Param, ...]
    named: Mapping[str, _Param]
    var_positional: bool = False
    var_keyword: bool = False


def _from_signature(forward: Callable[..., Any]) -> _Params | None:
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = inspect.Parameter
    found = [
        _Param(
            p.name,
            p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD),
            p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY),
            p.default,
        )
        for p in params
        if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
    ]
    return _Params(
        tuple(p for p in found if p.positional),
        {p.name: p for p in found if p.keyword},
        any(p.kind is kinds.VAR_POSITIONAL for p in params),
        any(p.kind is kinds.VAR_KEYWORD for p in params),
    )


def _from_spec(args: pytree.TreeSpec, keys: Sequence[str], placeholders: Sequence[str]) -> _Params:
    """The parameters a call of the example's structure shows, where the forward is not at hand (a
    module made from a store): a positional tensor by its placeholder's name (the forward's parameter
    name), a positional structure by position only, the keywords by name; no defaults."""
    positional = [
        _Param(placeholders[i], True, True) if child.is_leaf() else _Param(f"argument {i + 1}", True, False)
        for i, child in enumerate(_children(args))
    ]
    named = {p.name: p for p in positional if p.keyword} | {k: _Param(k, False, True) for k in keys}
    return _Params(tuple(positional), named)


class CallBinder:
    """A call's arguments as the example call's inputs, flattened as torch.export flattened those:
    bound to the forward's parameters as Python binds them (a positional input passed by name, keywords
    in any order), a constant of the example call (None, a flag, a number) taken where it is omitted or
    passed with the same value, and a parameter the example left out taken where its value is the
    forward's default (what the capture computed with); anything else refused, naming the argument."""

    def __init__(
        self,
        name: str,
        spec: pytree.TreeSpec,
        placeholders: Sequence[str],
        constants: Mapping[int, Any],
        forward: Callable[..., Any] | None = None,
    ) -> None:
        """`placeholders`: the exported program's user inputs, one per leaf of the call; `constants`:
        the leaves (by index) that the example call fixed; `forward`: the model's, for its parameters."""
        self.name, self.spec, self.placeholders = name, spec, list(placeholders)
        args, kwargs = _children(spec)
        self.n_pos, kw_keys = args.num_children, [str(k) for k in kwargs.context or []]
        params = _from_signature(forward) if forward is not None else None
        self.knows_defaults = params is not None and self._binds(params, kw_keys)
        self.params = params if params is not None and self.knows_defaults else _from_spec(args, kw_keys, placeholders)
        self.keys = [self._position_key(i) for i in range(self.n_pos)] + kw_keys
        children, start = [*_children(args), *_children(kwargs)], 0
        self.leaves: dict[str, list[Any]] = {}  # key -> per leaf: its constant, or _TENSOR
        self.child_spec: dict[str, pytree.TreeSpec] = {}
        for key, child in zip(self.keys, children, strict=True):
            n = child.num_leaves
            self.leaves[key] = [constants.get(i, _TENSOR) for i in range(start, start + n)]
            self.child_spec[key], start = child, start + n
        # tensors alone, by position, as models are mostly called: bound as they come
        self.plain = not kw_keys and all(c.is_leaf() for c in _children(args)) and not constants

    def _binds(self, params: _Params, kw_keys: Sequence[str]) -> bool:
        positional_ok = self.n_pos <= len(params.positional) or params.var_positional
        return positional_ok and all(k in params.named or params.var_keyword for k in kw_keys)

    def _position_key(self, i: int) -> str:
        return self.params.positional[i].name if i < len(self.params.positional) else f"*{i}"

    def __call__(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        if self.plain and not kwargs and len(args) == self.n_pos and all(isinstance(a, torch.Tensor) for a in args):
            return list(args)
        given = {k: _python_scalar(v) for k, v in self._given(args, kwargs).items()}
        # left out of the example call, passed at the forward's default (what the capture computed with)
        extra = {k: v for k, v in given.items() if k not in self.leaves and not _same(v, self._default(k))}
        checked = [*extra.items(), *((k, v) for k, v in given.items() if k in self.leaves)]
        for key, value in checked:  # a cache object first: it says the most
            if not isinstance(value, torch.Tensor | tuple | list | dict | None | bool | int | float):
                raise InputMismatchError(self._object_refusal(key, value))
        for key, value in extra.items():
            self._check_left_out(key, value)
        values, missing = [], []
        for key in self.keys:
            if key in given:
                value = given[key]
                if (
                    self.leaves[key] == [_TENSOR]
                    and self.child_spec[key].is_leaf()
                    and not isinstance(value, torch.Tensor | None)
                ):
                    raise InputMismatchError(
                        f"{self.name}: input {key!r} is a {type(value).__name__}; the model takes a tensor there"
                    )
                self._check_constants(key, given[key])
                values.append(given[key])
            elif _TENSOR not in self.leaves[key]:  # a constant of the example call: as it was
                captured = pytree.tree_unflatten(self.leaves[key], self.child_spec[key])
                self._check_left_out_constant(key, captured)
                values.append(captured)
            else:
                missing.append(key)
        if missing:
            raise InputMismatchError(
                f"{self.name}: {noun(len(missing), 'input')} {', '.join(map(repr, missing))} missing: the module "
                "was optimised for a call that passes "
                + ("it" if len(missing) == 1 else "them")
                + self._nones(given)
                + " (every tensor of the example call is an input; one it left out keeps its default)"
            )
        flat, got = pytree.tree_flatten(
            (tuple(values[: self.n_pos]), dict(zip(self.keys[self.n_pos :], values[self.n_pos :], strict=True)))
        )
        if got != self.spec:
            raise InputMismatchError(
                f"{self.name}: called as {pytree.treespec_pprint(got)}, where the module was optimised for "
                f"{pytree.treespec_pprint(self.spec)} (* a tensor or constant): the same arguments, nested as "
                "in the example call"
            )
        return flat

    def _given(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by key: a parameter's name, or `*i` for one in `*args`."""
        p = self.params
        if len(args) > len(p.positional) and not p.var_positional:
            names = ", ".join(x.name for x in p.positional)
            nones = self._nones(
                {self._position_key(i) if i < len(p.positional) else f"argument {i + 1}": a for i, a in enumerate(args)}
            )
            raise InputMismatchError(
                f"{self.name}: takes {counted(len(p.positional), 'positional input')} ({names}), got {len(args)}{nones}"
            )
        given = {self._position_key(i): a for i, a in enumerate(args)}
        unknown = {k: v for k, v in kwargs.items() if k not in p.named and not p.var_keyword}
        if unknown and not self.knows_defaults:
            shown = ", ".join(f"{k}={_shown(v)}" for k, v in unknown.items())
            raise InputMismatchError(
                f"{self.name}: {shown} not in the example call; this module, made from a store, knows that call "
                "only, not the forward's defaults: pass that call's arguments, or optimise again with the call "
                f"the model makes in example_kwargs ({shown})"
            )
        if unknown:
            raise InputMismatchError(unknown_keywords(self.name, unknown, list(p.named)))
        twice = [k for k in kwargs if k in given]
        if twice:
            raise InputMismatchError(
                f"{self.name}: {noun(len(twice), 'input')} {', '.join(map(repr, twice))} given twice"
            )
        given.update(kwargs)
        return given

    def _nones(self, values: Mapping[str, Any]) -> str:
        """The inputs given as None, named: a model's caller passes None for an input it does without."""
        nones = [k for k, v in values.items() if v is None]
        return f" ({', '.join(nones)} {noun(len(nones), 'is', 'are')} None)" if nones else ""

    def _default(self, key: str) -> Any:
        param = self.params.named.get(key) or next((p for p in self.params.positional if p.name == key), None)
        return _EMPTY if param is None else param.default

    def _captured(self, key: str) -> str:
        """What the example call passed for `key`, said."""
        if key in self.leaves:
            leaves = self.leaves[key]
            if _TENSOR in leaves:
                return f"{key} a tensor" if self.child_spec[key].is_leaf() else f"{key} a structure of tensors"
            return f"{key}={pytree.tree_unflatten(leaves, self.child_spec[key])!r} (in the example call)"
        default = self._default(key)
        if default is _EMPTY:
            return f"no {key} (the example call left it out)"
        return f"{key}={default!r} (the forward's default: the example call left it out)"

    def _object_refusal(self, key: str, value: Any) -> str:
        what, captured = type(value).__name__, self._captured(key)
        if is_cache(value):
            return (
                f"{self.name}: {key} is a {what} (a KV cache), where the module was captured with {captured}: it "
                "was captured without a cache and computes without one (it would neither read the cache nor add "
                "this call's keys and values to it). Call the Hugging Face model with use_cache=False "
                "(model(input_ids, use_cache=False)); a cache object cannot be part of a captured call, and "
                "generate(), whose sequence grows at every step, cannot be served by a module of fixed shapes"
            )
        return (
            f"{self.name}: {key} is an instance of {what}, where the module was captured with {captured}: it "
            "takes tensors (and tuples of them), None, flags and numbers as the example call passed them; pass that"
        )

    def _check_left_out(self, key: str, value: Any) -> None:
        """An argument the example call left out: taken where its value is the forward's default."""
        default, shown = self._default(key), _shown(value)
        if default is _EMPTY:
            again = "that tensor" if _has_tensor(value) else shown
            raise InputMismatchError(
                f"{self.name}: argument {key!r} ({shown}) was not in the example inputs it was optimised for "
                "(the forward takes it in **kwargs; the example call left it out): call it without it, or "
                f"optimise again with example_kwargs={{{key!r}: {again}}}, as the model is called"
            )
        if _has_tensor(value):
            raise InputMismatchError(
                f"{self.name}: argument {key!r} is {shown}, where the module was optimised for a call with "
                f"{self._captured(key)}; passing {key} changes what the model computes, so this module cannot serve "
                f"the call: call it without {key}, or optimise the model again with one in the example call "
                f"({self._example_with(key)})"
            )
        raise InputMismatchError(
            f"{self.name}: {key}={shown}, where the module was captured with {self._captured(key)}; the module "
            f"computes as that call did. Call it without {key} (or with {default!r}), or optimise again with "
            f"example_kwargs={{{key!r}: {shown}}} for this call"
        )

    def _example_with(self, key: str) -> str:
        """How an example call passes `key`: by position where the forward takes it so (the example's
        positional inputs before it, then it), else by name."""
        names = [p.name for p in self.params.positional]
        if key in names and names.index(key) >= self.n_pos:
            before = names[: names.index(key) + 1]
            return f"example_inputs=({', '.join(before)})"
        return f"example_kwargs={{{key!r}: {key}}}"

    def _check_left_out_constant(self, key: str, captured: Any) -> None:
        """A constant of the example call that a call leaves out: the model would take the forward's
        default there, so the module, which computes with the captured value, refuses where they differ
        (a module from a store knows no defaults: it takes the captured value)."""
        default = self._default(key)
        if default is not _EMPTY and not _same(default, captured):
            raise InputMismatchError(
                f"{self.name}: {key} left out, where the model would take the forward's default {key}="
                f"{_shown(default)}; the module was captured with {key}={_shown(captured)} (in the example "
                f"call): pass {key}={_shown(captured)}, or optimise again with the call that leaves it out"
            )

    def _check_constants(self, key: str, value: Any) -> None:
        """A value where the example call passed a constant: the same constant, or refused."""
        want = self.leaves[key]
        got, spec = pytree.tree_flatten(value)
        if spec != self.child_spec[key] or all(w is _TENSOR for w in want):
            return  # tensors are checked with their shapes; another structure is refused whole
        if all(w is _TENSOR or _same(g, w) for g, w in zip(got, want, strict=True)):
            return
        shown = _shown(value)
        again = "that tensor" if _has_tensor(value) else shown
        raise InputMismatchError(
            f"{self.name}: {key}={shown}, where the module was captured with {self._captured(key)}; the module "
            f"computes as that call did. Call it with that value or without {key}, or optimise again with "
            f"example_kwargs={{{key!r}: {again}}} for this call"
        )


class _Tensor:
    """A leaf of the example call that was a tensor (an input, not a constant)."""

    def __repr__(self) -> str:
        return "<tensor>"


_TENSOR = _Tensor()


def _python_scalar(value: Any) -> Any:
    """A NumPy scalar (np.float32(0.5), np.bool_(True)) as the Python number or flag it holds, as a
    constant of the call is compared and computed with; anything else as it is."""
    return value.item() if isinstance(value, np.generic) and np.ndim(value) == 0 else value


def _same(a: Any, b: Any) -> bool:
    """Whether a call's value is the captured constant `b` (a flag is not a number: False is not 0)."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor | bool) or isinstance(b, torch.Tensor | bool):
        return False
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return isinstance(a, str) and isinstance(b, str) and a == b


def is_cache(value: object) -> bool:
    """A KV cache object (transformers' `Cache` and its kinds, or any class named so)."""
    return any(c.__name__.endswith("Cache") for c in type(value).__mro__)


def _has_tensor(value: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value))


def _shown(value: Any) -> str:
    """A value for a message: a tensor by its shape and dtype."""
    if isinstance(value, torch.Tensor):
        return f"a {list(value.shape)} {value.dtype} tensor"
    if isinstance(value, tuple | list) and _has_tensor(value):
        return f"a {type(value).__name__} of {len(value)}"
    return repr(value)


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
        if value is None:
            raise InputMismatchError(
                f"{name}: input {key} is None, where the example call passed a {list(want[0])} {want[1]} tensor "
                "and the module computes with one: pass it, or optimise again for a call without it"
            )
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
    return (
        f"{'; '.join(dims)}; shapes are fixed: optimise again for this shape (a sequence that grows at each "
        "call, as generate() makes, or a growing KV cache, is served by no one shape: docs/torch.md)"
    )
