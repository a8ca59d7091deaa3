"""Sibling runs: a budgeted task hands on at most one task per depth, and a run covers exactly the
sibling subtrees it stands for."""

from __future__ import annotations

import pytest

from mugraph.stages.search.explore import SearchPathError
from mugraph.stages.search.serial import run_search
from mugraph.stages.search.task_paths import (
    ROOT_SHARE,
    SIBLINGS,
    frontier_tasks,
    show,
    sibling_run,
    split_run,
    task_budget,
)
from tests.stages.search.test_explore import full, searcher


def test_runs_round_trip_and_plain_paths_are_not_runs() -> None:
    assert split_run(sibling_run((3, 1), 4)) == ((3, 1), 4)
    assert split_run(sibling_run((), 0)) == ((), 0)
    assert split_run((3, 1, 4)) is None and split_run(()) is None
    assert show(sibling_run((3, 1), 4)) == "[3, 1, 4…]" and show((3, 1)) == "[3, 1]"
    with pytest.raises(ValueError):
        sibling_run((), SIBLINGS)


def test_consecutive_siblings_become_one_run_and_lone_entries_stay_paths() -> None:
    stack = [(0, 2, 5), (0, 2, 7), (0, 2, 9), (0, 4), (1,), (2,), (3,)]
    # the shallowest depth's siblings (the largest subtrees) stay one task each
    assert frontier_tasks(stack) == [sibling_run((0, 2), 5), (0, 4), (1,), (2,), (3,)]
    assert frontier_tasks([(0, 4)]) == [(0, 4)]
    assert frontier_tasks([]) == []


@pytest.mark.parametrize("budget", [5, 40])
def test_a_budgeted_frontier_holds_one_task_per_depth_at_most(budget: int) -> None:
    """Below the shallowest depth, that is; the shallowest one's siblings stay single tasks."""
    r = searcher("lora").explore((), budget=budget)
    assert r.frontier, "the budget must stop the exploration for this test to mean anything"
    parents = [run[0] if (run := split_run(t)) else t[:-1] for t in r.frontier]
    top = min(map(len, parents))
    deeper = [p for p in parents if len(p) > top]
    assert len(set(deeper)) == len(deeper)  # one task per parent, so per depth
    assert all(split_run(t) is None for t, p in zip(r.frontier, parents, strict=True) if len(p) == top)
    depths = [len(p) for p in parents]
    assert depths == sorted(depths, reverse=True)  # deepest (next) first
    assert any(split_run(t) for t in r.frontier)


def test_a_run_covers_exactly_its_siblings() -> None:
    """Exploring a run unbudgeted visits the same nodes and finds the same μGraphs as exploring
    each of its siblings on its own."""
    s = searcher("rms_norm")
    _, root_kids = s.kept_children(())
    first = root_kids[len(root_kids) // 2]
    run = s.explore(sibling_run((), first))
    assert not run.frontier
    nodes, found = 0, {}
    for i in root_kids:
        if i >= first:
            one = s.explore((i,))
            nodes += one.counters.nodes
            found.update({d: f.path for d, f in one.found.items()})
    assert run.counters.nodes == nodes > 0
    assert {d: f.path for d, f in run.found.items()} == found
    assert run.counters.children == sum(s.explore((i,)).counters.children for i in root_kids if i >= first)
    whole = full("rms_norm")
    assert set(run.found) <= set(whole.found)


def test_a_run_must_start_at_a_kept_child() -> None:
    s = searcher("rms_norm")
    kids, kept_list = s.kept_children(())
    kept = set(kept_list)
    pruned = [i for i in range(kids.listed) if i not in kept]  # a kernel node's indices run from 0
    with pytest.raises(SearchPathError, match="not a kept child"):
        s.explore(sibling_run((), kids.listed + 3))
    if pruned:
        with pytest.raises(SearchPathError, match="not a kept child"):
            s.explore(sibling_run((), pruned[0]))


def test_only_the_root_task_gets_a_smaller_budget() -> None:
    assert task_budget((), 10_000) == 10_000 // ROOT_SHARE < 10_000
    assert task_budget((), 1) == 1  # never below one node
    assert task_budget((0,), 10_000) == task_budget(sibling_run((), 3), 10_000) == 10_000


def test_the_serial_search_stops_the_root_early_and_finds_the_same() -> None:
    """The root's frontier comes after a fraction of the budget, as the root's remaining kept
    children one task each; the whole search still finds what one unbudgeted exploration finds."""
    s = searcher("rms_norm")
    budget = 40 * ROOT_SHARE
    first = s.explore((), task_budget((), budget))
    assert first.counters.nodes == budget // ROOT_SHARE
    _, root_kids = s.kept_children(())
    tops = [t for t in first.frontier if len(t) == 1]
    assert tops and all(split_run(t) is None for t in tops) and [t[0] for t in tops] == sorted(t[0] for t in tops)
    assert tops[-1][0] == root_kids[-1]
    nodes_after: list[int] = []
    report = run_search(searcher("rms_norm"), budget, on_progress=lambda r: nodes_after.append(r.counters.nodes))
    assert nodes_after[0] == budget // ROOT_SHARE
    assert set(report.found) == set(full("rms_norm").found) and report.counters.nodes == full("rms_norm").counters.nodes
