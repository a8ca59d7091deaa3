"""The matcher under the norms, on small exported graphs: a name met twice is one node, casts are
looked through (most first), operands commute where asked, and a match whose pieces are read
elsewhere is not taken."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from mugraph.torch.capture import export
from mugraph.torch.patterns import Capture, Cast, Match, Num, Pattern, call, commuted, find, same_value
from tests.helpers.torch_models import inputs

aten = torch.ops.aten


def nodes(fn: Callable[..., Any], *shapes: tuple[int, ...]) -> list[fx.Node]:
    return list(export(fn, inputs(*shapes)).graph.nodes)


def matches(pattern: Pattern, graph: list[fx.Node]) -> list[tuple[str, dict[str, Any]]]:
    """(root, captured names) of every accepted match, latest root first taken."""
    found = find(graph, [(pattern, lambda root, m: (root.name, {k: getattr(v, "name", v) for k, v in m.binds}))])
    return [made for made, _ in found]


def test_a_name_met_twice_must_be_the_same_node() -> None:
    square = call(aten.mul.Tensor, Capture("x"), Capture("x"))
    assert matches(square, nodes(lambda x: x * x, (4, 8))) == [("mul", {"x": "x"})]
    assert matches(square, nodes(lambda x, y: x * y, (4, 8), (4, 8))) == []


def test_casts_are_looked_through_most_first_and_belong_to_the_match() -> None:
    graph = nodes(lambda x: torch.exp(x.float()).half(), (4, 8))
    pattern = Cast(call(aten.exp.default, Cast(Capture("x"))))
    ((made, covered),) = find(graph, [(pattern, lambda root, m: m.get("x").name)])
    assert made == "x" and {n.name for n in covered} == {"_to_copy", "exp", "_to_copy_1"}


def test_commuted_operands_and_numbers() -> None:
    pattern = commuted(aten.mul.Tensor, Capture("t"), Capture("k", Num()))
    assert matches(pattern, nodes(lambda x: 3.0 * x, (4, 8))) == [("mul", {"t": "x", "k": 3.0})]
    assert matches(call(aten.mul.Tensor, Capture("k", Num()), Capture("t")), nodes(lambda x: x * 3.0, (4, 8))) == []


def exp_returned_too(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    e = torch.exp(x)
    return e + y, e


def test_a_match_whose_pieces_are_read_elsewhere_is_not_taken() -> None:
    pattern = call(aten.add.Tensor, call(aten.exp.default, Capture("x")), Capture("y"))
    assert [r for r, _ in matches(pattern, nodes(lambda x, y: torch.exp(x) + y, (4, 8), (4, 8)))] == ["add"]
    assert matches(pattern, nodes(exp_returned_too, (4, 8), (4, 8))) == []


def test_matches_do_not_overlap_and_the_latest_root_wins() -> None:
    exp_of = call(aten.exp.default, Capture("x"))
    chain = nodes(lambda x: torch.exp(torch.exp(x)), (4, 8))
    assert [r for r, _ in matches(call(aten.exp.default, exp_of), chain)] == ["exp_1"]
    assert Match().bound("a", 1) == Match((("a", 1),))


def test_one_value_computed_twice_is_one_value_but_two_random_draws_are_not() -> None:
    def twice(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = x.mean(-1, keepdim=True)
        return x - m, x - m, torch.rand_like(x), torch.rand_like(x), x - 2 * m

    graph = nodes(twice, (8, 64))
    subs = [n for n in graph if n.target is aten.sub.Tensor]
    draws = [n for n in graph if n.target is aten.rand_like.default]
    assert len(subs) == 3 and len(draws) == 2
    assert same_value(subs[0], subs[1]) and not same_value(subs[0], subs[2])
    assert not same_value(draws[0], draws[1])
