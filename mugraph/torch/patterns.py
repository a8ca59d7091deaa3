"""A small matcher over an exported ATen graph: a pattern is a tree of tests on fx nodes and their
arguments (an op and its operands, a number, a captured value), matched with backtracking, so the
several ways users write one computation are one pattern each, not a chain of special cases.

A match names the nodes it covers (its *interior*) and the values it captured. A pattern whose
interior nodes are read only inside it can become one IR op: the lowering never sees the pieces, so
no fragment cut can fall between them (`norms.py` holds the normalisations found this way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import fx

from mugraph.torch.lower_operands import bind

aten = torch.ops.aten

# Nodes that only assert something about a value (export's dtype checks around a cast): they make no
# value, so a reader of this kind never keeps a node out of a pattern.
ASSERTS = frozenset({aten._assert_tensor_metadata.default, aten._assert_scalar.default})
T = TypeVar("T")
FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


@dataclass(frozen=True)
class Match:
    """What a pattern matched so far: captured values by name, and the nodes it covers."""

    binds: tuple[tuple[str, Any], ...] = ()
    nodes: frozenset[fx.Node] = frozenset()

    def get(self, name: str, default: Any = None) -> Any:
        for key, value in self.binds:
            if key == name:
                return value
        return default

    def has(self, name: str) -> bool:
        return any(key == name for key, _ in self.binds)

    def bound(self, name: str, value: Any) -> Match | None:
        """This match with `name` bound to `value`; None where it is bound to something else."""
        if self.has(name):
            old = self.get(name)
            same = same_value(old, value) if isinstance(value, fx.Node) or isinstance(old, fx.Node) else old == value
            return self if same else None
        return Match((*self.binds, (name, value)), self.nodes)

    def covering(self, node: fx.Node) -> Match:
        return Match(self.binds, self.nodes | {node})


def same_value(a: Any, b: Any) -> bool:
    """Whether two fx values are one value: the same node, or two calls of one pure ATen op on the same
    values (DeBERTa's LayerNorm computes `x - mean` twice); a seeded random op never is."""
    if a is b:
        return True
    if not (isinstance(a, fx.Node) and isinstance(b, fx.Node)) or a.op != "call_function" or b.op != "call_function":
        return False
    target = a.target
    if target is not b.target or not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return (
        _same_args(a.args, b.args)
        and a.kwargs.keys() == b.kwargs.keys()
        and all(_same_args(a.kwargs[k], b.kwargs[k]) for k in a.kwargs)
    )


def _same_args(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_args(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, fx.Node) or isinstance(b, fx.Node):
        return same_value(a, b)
    return type(a) is type(b) and a == b


class Pattern:
    """Yields every way `value` matches, each extending `m` (a generator: alternatives backtrack)."""

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        raise NotImplementedError


@dataclass(frozen=True)
class AnyValue(Pattern):
    """Anything (an argument whose value the pattern does not care about)."""

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        yield m


@dataclass(frozen=True)
class Capture(Pattern):
    """`inner`, its value bound to `name`: a name met twice must name the same node (or equal value)."""

    name: str
    inner: Pattern = AnyValue()

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        for got in self.inner.match(value, m):
            out = got.bound(self.name, value)
            if out is not None:
                yield out


@dataclass(frozen=True)
class Num(Pattern):
    """A Python number (not a tensor), equal to `value` where given."""

    value: float | None = None

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and (self.value is None or float(value) == self.value):
            yield m


@dataclass(frozen=True)
class Call(Pattern):
    """A call of one of `targets` whose arguments (by schema position, then by schema name) match;
    arguments not named are not looked at. `where` tests the node itself (its dims against its rank)."""

    targets: frozenset[Any]
    args: tuple[Pattern, ...] = ()
    kwargs: tuple[tuple[str, Pattern], ...] = ()
    where: Callable[[fx.Node], bool] | None = None

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        if not (isinstance(value, fx.Node) and value.op == "call_function" and value.target in self.targets):
            return
        if self.where is not None and not self.where(value):
            return
        if hasattr(value.target, "_schema"):
            bound = bind(value)
            names = [a.name for a in value.target._schema.arguments]
        else:  # a Python function (operator.getitem): its arguments by position
            bound = {str(i): a for i, a in enumerate(value.args)}
            names = list(bound)
        if len(self.args) > len(names):
            return
        wanted = [(names[i], p) for i, p in enumerate(self.args)] + list(self.kwargs)
        yield from _args(bound, wanted, m.covering(value))


def _args(bound: dict[str, Any], wanted: Sequence[tuple[str, Pattern]], m: Match) -> Iterator[Match]:
    if not wanted:
        yield m
        return
    (name, p), rest = wanted[0], wanted[1:]
    if name not in bound:
        return
    for got in p.match(bound[name], m):
        yield from _args(bound, rest, got)


@dataclass(frozen=True)
class Alt(Pattern):
    """The first alternative that matches, then the next (backtracking)."""

    options: tuple[Pattern, ...]

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        for p in self.options:
            yield from p.match(value, m)


@dataclass(frozen=True)
class Cast(Pattern):
    """`inner`, seen through any dtype-only casts (`x.to(torch.float32)`), the most casts first: a
    cast the pattern looks through is part of it."""

    inner: Pattern

    def match(self, value: Any, m: Match) -> Iterator[Match]:
        if is_cast(value):
            yield from self.match(value.args[0], m.covering(value))
        yield from self.inner.match(value, m)


def is_cast(value: Any) -> bool:
    """A float-to-float dtype conversion and nothing else (no device, layout or format change)."""
    if not (isinstance(value, fx.Node) and value.op == "call_function"):
        return False
    if value.target is aten._to_copy.default:
        extra = {k: v for k, v in value.kwargs.items() if k != "dtype"}
        dtype = value.kwargs.get("dtype")
    elif value.target is aten.type_as.default:  # x.type_as(y): x in y's dtype
        other = value.args[1] if len(value.args) == 2 else None
        target = other.meta.get("val") if isinstance(other, fx.Node) else None
        if not isinstance(target, torch.Tensor) or value.kwargs:
            return False
        extra, dtype = {}, target.dtype
    elif value.target is aten.to.dtype:
        b = bind(value)
        extra = {k: b[k] for k in ("non_blocking", "copy") if b.get(k)} | (
            {"memory_format": b["memory_format"]} if b.get("memory_format") is not None else {}
        )
        dtype = b.get("dtype")
    else:
        return False
    src = value.args[0].meta.get("val") if isinstance(value.args[0], fx.Node) else None
    two = value.target in (aten.to.dtype, aten.type_as.default)  # the dtype (or a tensor of it) as an argument
    if extra or len(value.args) != 1 + two or not isinstance(src, torch.Tensor):
        return False
    return dtype in FLOATS and src.dtype in FLOATS


def call(target: Any, *args: Pattern, where: Callable[[fx.Node], bool] | None = None, **kwargs: Pattern) -> Call:
    targets = frozenset(target) if isinstance(target, tuple | list | frozenset | set) else frozenset({target})
    return Call(targets, args, tuple(kwargs.items()), where)


def either(*options: Pattern) -> Alt:
    return Alt(options)


def commuted(target: Any, a: Pattern, b: Pattern, **kwargs: Pattern) -> Alt:
    """`target(a, b)` or `target(b, a)`."""
    named = tuple(kwargs.items())
    return Alt((Call(frozenset({target}), (a, b), named), Call(frozenset({target}), (b, a), named)))


def closed(m: Match, root: fx.Node) -> bool:
    """Every node the match covers, the root aside, is read only by nodes it covers (or by asserts):
    the pattern can replace them all."""
    return all(all(u in m.nodes or u.target in ASSERTS for u in n.users) for n in m.nodes if n is not root)


def find(
    nodes: Sequence[fx.Node], rules: Sequence[tuple[Pattern, Callable[[fx.Node, Match], T | None]]]
) -> list[tuple[T, frozenset[fx.Node]]]:
    """Non-overlapping matches, the latest roots first (so the largest pattern, a norm times its weight,
    wins over the norm inside it): at each root, what `accept` makes of the first rule and match it
    takes, with the nodes the match covers."""
    taken: set[fx.Node] = set()
    out: list[tuple[T, frozenset[fx.Node]]] = []
    for root in reversed(nodes):
        if root in taken or root.op != "call_function":
            continue
        for pattern, accept in rules:
            hit = next(
                (
                    (made, m.nodes)
                    for m in pattern.match(root, Match())
                    if closed(m, root) and not (m.nodes & taken) and (made := accept(root, m)) is not None
                ),
                None,
            )
            if hit is not None:
                taken |= hit[1]
                out.append(hit)
                break
    out.reverse()
    return out
