"""A task that continues where the searcher's last walk stopped starts without listing again.

The next task a searcher runs is often one of the frontier tasks its last walk left (serially,
always): the nodes and expansions whose children that walk left on its stack are kept, so such a
task neither replays its parent's path nor lists the parent's children again, and it starts from
the same nodes a cold searcher would rebuild.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import mugraph.stages.search.explore as explore_module
from mugraph.stages.search.nodes import BlockNode, Lazy, Node
from mugraph.stages.search.task_paths import split_run
from tests.helpers.search import searcher


def _rows(node: Node) -> object:
    return node.rows if isinstance(node, BlockNode) else node


def _counting(calls: list[str], name: str, f: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return f(*args, **kwargs)

    return counted


@pytest.mark.parametrize(("name", "budget"), [("lora", 400), ("gated_mlp", 300), ("rms_norm", 60)])
def test_the_frontier_of_the_last_walk_starts_without_listing(
    name: str, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm = searcher(name)
    first = warm.explore((), budget)
    assert first.frontier, "the budget leaves a frontier"
    tasks = first.frontier
    assert any(split_run(t) is not None for t in tasks) or any(len(t) > 1 for t in tasks)
    calls: list[str] = []
    for f in ("block_child", "block_expansion", "kernel_expansion"):
        monkeypatch.setattr(explore_module, f, _counting(calls, f, getattr(explore_module, f)))
    starts = {}
    for task in tasks:
        stack, ranks = warm._task_stack(task)
        starts[task] = ([(p, _rows(top.build() if isinstance(top, Lazy) else top)) for p, top in stack], ranks)
    assert calls == [], f"a frontier task listed again: {calls[:5]}"
    monkeypatch.undo()
    for task in tasks:  # a cold searcher rebuilds the same start from the tree
        cold = searcher(name)
        stack, ranks = cold._task_stack(task)
        assert starts[task] == ([(p, _rows(top.build() if isinstance(top, Lazy) else top)) for p, top in stack], ranks)


def test_a_task_after_the_frontier_is_the_same_as_on_a_cold_searcher() -> None:
    """Each frontier task explored on the warm searcher, one after the other, gives what a cold
    searcher gives for it: the kept nodes change when work is done, never what is found."""
    warm = searcher("lora")
    tasks = warm.explore((), 400).frontier
    for task in tasks[:6]:
        hot = warm.explore(task, 400)
        cold = searcher("lora").explore(task, 400)
        assert hot.frontier == cold.frontier and hot.ranks == cold.ranks
        assert {d: f.path for d, f in hot.found.items()} == {d: f.path for d, f in cold.found.items()}
        assert hot.counters.nodes == cold.counters.nodes and hot.counters.children == cold.counters.children
