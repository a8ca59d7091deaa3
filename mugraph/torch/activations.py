"""Activations written out as element-wise arithmetic on one tensor, found by what they compute: the
tanh GELU of GPT-2 and Hugging Face's `NewGELUActivation` / `FastGELUActivation` (`0.5 * x * (1 +
tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))` and its spellings), the erf GELU of older BERT code (`x *
0.5 * (1 + erf(x / sqrt(2)))`), SiLU as `x * sigmoid(x)` or `x / (1 + exp(-x))`.

Spellings are many (constant folded or not, x**3 or x*x*x, the 0.5 on either side), so no tree pattern
is written for each: a region of element-wise ops whose only tensor operand is one `x` is evaluated
in float64 on points from -50 to 50 and compared with each activation. Where it agrees to 1e-6 of
the largest value (a hand-written constant such as 0.7978845608 differs by 1e-11; the tanh and erf
GELUs differ by 5e-4, x·sigmoid(1.702x) from both by 2e-2), the region lowers to that one IR op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from torch import fx

from mugraph.torch.composite import Composite, CompositeKind
from mugraph.torch.lower_operands import meta
from mugraph.torch.patterns import Match, closed, is_cast

aten = torch.ops.aten

# element-wise ops of a written activation: with scalar operands aside, each reads one tensor
ELEMENTWISE = frozenset(
    {
        aten.mul.Tensor,
        aten.mul.Scalar,
        aten.add.Tensor,
        aten.add.Scalar,
        aten.sub.Tensor,
        aten.sub.Scalar,
        aten.rsub.Scalar,
        aten.div.Tensor,
        aten.div.Scalar,
        aten.pow.Tensor_Scalar,
        aten.neg.default,
        aten.reciprocal.default,
        aten.sqrt.default,
        aten.rsqrt.default,
        aten.square.default,
        aten.tanh.default,
        aten.erf.default,
        aten.exp.default,
        aten.sigmoid.default,
    }
)
# every activation below needs one of these: a region without one is not looked at
TRANSCENDENTAL = frozenset({aten.tanh.default, aten.erf.default, aten.exp.default, aten.sigmoid.default})
MAX_REGION = 24  # nodes: the longest spelling (FastGELU with casts) has 12


def _gelu_tanh(t: torch.Tensor) -> torch.Tensor:
    return 0.5 * t * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t**3)))


KNOWN: tuple[tuple[CompositeKind, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    ("gelu", _gelu_tanh),
    ("gelu_erf", lambda t: 0.5 * t * (1.0 + torch.erf(t / math.sqrt(2.0)))),
    ("silu", lambda t: t * torch.sigmoid(t)),
)
POINTS = torch.cat(
    [torch.linspace(-8.0, 8.0, 161, dtype=torch.float64), torch.tensor([-50.0, -20.0, -1e-3, 1e-3, 20.0, 50.0])]
)
TOLERANCE = 1e-6
KNOWN_VALUES = tuple((kind, f(POINTS)) for kind, f in KNOWN)  # each activation at POINTS, made once


def _member(node: fx.Node) -> bool:
    return node.op == "call_function" and (node.target in ELEMENTWISE or is_cast(node))


def _cone(root: fx.Node) -> list[fx.Node]:
    """The element-wise nodes `root` is computed from (root first), at most MAX_REGION of them."""
    seen = [root]
    stack = [root]
    while stack and len(seen) < MAX_REGION:
        for a in stack.pop().all_input_nodes:
            if a not in seen and _member(a):
                seen.append(a)
                stack.append(a)
    return seen


def _region(root: fx.Node, cone: Sequence[fx.Node], x: fx.Node) -> set[fx.Node] | None:
    """The cone's nodes between `x` and `root`, where every tensor they read is `x` or one of them."""
    reach: dict[fx.Node, bool] = {}

    def depends(n: fx.Node) -> bool:
        if n is x:
            return True
        if n not in reach:
            reach[n] = n in cone and any(depends(a) for a in n.all_input_nodes)
        return reach[n]

    region = {n for n in cone if depends(n)}
    if any(a is not x and a not in region for n in region for a in n.all_input_nodes):
        return None
    return region if root in region else None


def _evaluate(order: Sequence[fx.Node], x: fx.Node) -> torch.Tensor | None:
    """The region's value at POINTS (x = the points), in float64; casts are identities."""
    env: dict[fx.Node, Any] = {x: POINTS}
    try:
        for n in order:
            if is_cast(n):
                env[n] = env[n.all_input_nodes[0]]
                continue
            args = [env[a] if isinstance(a, fx.Node) else a for a in n.args]
            kwargs = {k: env[v] if isinstance(v, fx.Node) else v for k, v in n.kwargs.items()}
            env[n] = n.target(*args, **kwargs)  # type: ignore[operator]
    except (RuntimeError, TypeError, KeyError):
        return None
    out = env[order[-1]]
    return out if isinstance(out, torch.Tensor) and out.shape == POINTS.shape else None


def _which(value: torch.Tensor) -> CompositeKind | None:
    for kind, want in KNOWN_VALUES:
        if float((value - want).abs().max()) <= TOLERANCE * max(1.0, float(want.abs().max())):
            return kind
    return None


def _same_kind(node: fx.Node, root_val: torch.Tensor) -> bool:
    v = meta(node)
    return isinstance(v, torch.Tensor) and v.dtype == root_val.dtype and tuple(v.shape) == tuple(root_val.shape)


def _match(root: fx.Node, taken: Collection[fx.Node]) -> Composite | None:
    root_val = meta(root)
    if not (isinstance(root_val, torch.Tensor) and root_val.is_floating_point()):
        return None
    cone = _cone(root)
    if not any(n.target in TRANSCENDENTAL for n in cone):
        return None
    leaves = [a for n in cone for a in n.all_input_nodes] + cone[1:]
    regions = []
    for x in dict.fromkeys(leaves):  # each candidate x once, in order
        if x in taken or not _same_kind(x, root_val):
            continue
        region = _region(root, cone, x)
        if region is None or len(region) < 2 or any(not _same_kind(n, root_val) for n in region if not is_cast(n)):
            continue
        regions.append((x, region))
    for x, region in sorted(regions, key=lambda r: -len(r[1])):  # the widest region first
        if not region.isdisjoint(taken) or not closed(Match(nodes=frozenset(region)), root):
            continue
        order = [n for n in root.graph.nodes if n in region]
        value = _evaluate(order, x)
        kind = _which(value) if value is not None else None
        if kind is not None:
            return Composite(kind, root, x, 0.0, None, None, frozenset(n.name for n in region))
    return None


def find_activations(nodes: Sequence[fx.Node], taken: Collection[str] = ()) -> dict[str, Composite]:
    """Every written-out activation in `nodes` whose pieces nothing else reads and that no node named
    in `taken` belongs to, by its root node's name (the latest roots first, so the widest wins)."""
    by_name = {n.name: n for n in nodes}
    used: set[fx.Node] = {by_name[t] for t in taken if t in by_name}
    out: dict[str, Composite] = {}
    for root in reversed(nodes):
        if root in used or not _member(root) or is_cast(root):
            continue
        found = _match(root, used)
        if found is not None:
            used |= {by_name[n] for n in found.nodes}
            out[root.name] = found
    return dict(reversed(list(out.items())))
