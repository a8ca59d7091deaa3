"""Sibling runs: a budgeted task hands on at most one task per depth, and a run covers exactly the
sibling subtrees it stands for."""

from __future__ import annotations

import pytest

from mugraph.stages.search.explore import Searcher, SearchPathError
from mugraph.stages.search.serial import run_search
from mugraph.stages.search.task_paths import (
    ROOT_SHARE,
    SIBLINGS,
    SPREAD,
    Run,
    ranked_frontier,
    show,
    sibling_run,
    split_run,
    task_budget,
)
from tests.helpers.search import full, searcher


def test_runs_round_trip_and_plain_paths_are_not_runs() -> None:
    assert split_run(sibling_run((3, 1), 4)) == Run((3, 1), 4, None)
    assert split_run(sibling_run((), 0)) == Run((), 0, None)
    assert split_run(sibling_run((3, 1), 4, 9)) == Run((3, 1), 4, 9)
    assert split_run(sibling_run((), 0, 0)) == Run((), 0, 0)
    assert split_run((3, 1, 4)) is None and split_run(()) is None
    assert show(sibling_run((3, 1), 4)) == "[3, 1, 4…]" and show((3, 1)) == "[3, 1]"
    assert show(sibling_run((3,), 4, 9)) == "[3, 4…9]"
    # a run follows the exploration order, where a later child may have a smaller index
    assert split_run(sibling_run((), 5, 4)) == Run((), 5, 4)
    with pytest.raises(ValueError):
        sibling_run((), SIBLINGS)
    with pytest.raises(ValueError):
        sibling_run((), 5, -1)


def frontier_tasks(unexplored: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The tasks `ranked_frontier` makes of a stack (ranks aside)."""
    return ranked_frontier(unexplored, [0] * len(unexplored))[0]


def test_consecutive_siblings_become_one_run_and_lone_entries_stay_paths() -> None:
    stack = [(0, 2, 5), (0, 2, 7), (0, 2, 9), (0, 4), (1,), (2,), (3,)]
    # the shallowest depth's siblings (the largest subtrees) stay one task each
    assert frontier_tasks(stack) == [sibling_run((0, 2), 5), (0, 4), (1,), (2,), (3,)]
    assert frontier_tasks([(0, 4)]) == [(0, 4)]
    assert frontier_tasks([]) == []


@pytest.mark.parametrize("many", [SPREAD + 1, 5 * SPREAD + 3, 1000])
def test_many_shallowest_siblings_become_spread_bounded_runs_covering_them_in_order(many: int) -> None:
    siblings = [(7, 2 * i + 1) for i in range(many)]  # kept indices need not be consecutive numbers
    tasks = frontier_tasks([(7, 1, 0, 4), *siblings])
    assert tasks[0] == (7, 1, 0, 4) and len(tasks) == 1 + SPREAD
    covered: list[tuple[int, ...]] = []
    sizes = []
    for t in tasks[1:]:
        run = split_run(t)
        ends = [s[-1] for s in siblings]
        members = [t] if run is None or run.last is None else siblings[ends.index(run.first) : ends.index(run.last) + 1]
        assert run is None or (run.last is not None and members[0][-1] == run.first and members[-1][-1] == run.last)
        covered.extend(members)
        sizes.append(len(members))
    assert covered == siblings  # each exactly once, in order
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("budget", [5, 40])
def test_a_budgeted_frontier_holds_one_task_per_depth_at_most(budget: int) -> None:
    """Below the shallowest depth, that is; the shallowest one's siblings stay single tasks."""
    r = searcher("lora").explore((), budget=budget)
    assert r.frontier, "the budget must stop the exploration for this test to mean anything"
    parents = [run[0] if (run := split_run(t)) else t[:-1] for t in r.frontier]
    top = min(map(len, parents))
    deeper = [p for p in parents if len(p) > top]
    assert len(set(deeper)) == len(deeper)  # one task per parent, so per depth
    shallowest = [t for t, p in zip(r.frontier, parents, strict=True) if len(p) == top]
    assert all(split_run(t) is None for t in shallowest) or len(shallowest) == SPREAD
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
    later = root_kids[root_kids.index(first) :]  # in exploration order
    for i in later:
        one = s.explore((i,))
        nodes += one.counters.nodes
        found.update({d: f.path for d, f in one.found.items()})
    assert run.counters.nodes == nodes > 0
    assert {d: f.path for d, f in run.found.items()} == found
    assert run.counters.children == sum(s.explore((i,)).counters.children for i in later)
    whole = full("rms_norm")
    assert set(run.found) <= set(whole.found)


def test_a_bounded_run_covers_exactly_its_siblings_and_leaves_the_rest_bounded() -> None:
    """A bounded run explores its siblings and no later one; budgeted, its frontier stops at its
    last sibling too, and the tasks it hands on cover the rest of it exactly."""
    s = searcher("rms_norm")
    queue: list[tuple[int, ...]] = [()]
    while len(kids := s.kept_children(parent := queue.pop(0))[1]) < 6:  # a wide node: a block structure
        queue.extend(parent + (i,) for i in kids)
    first, last = kids[1], kids[-2]
    run = s.explore(sibling_run(parent, first, last))
    each = [s.explore((*parent, i)) for i in kids[1:-1]]
    assert run.counters.nodes == sum(r.counters.nodes for r in each) > 0
    assert set(run.found) == set().union(*(r.found for r in each))
    budgeted = s.explore(sibling_run(parent, first, last), budget=max(1, run.counters.nodes // 3))
    assert budgeted.frontier
    nodes, found, tasks = budgeted.counters.nodes, set(budgeted.found), list(budgeted.frontier)
    while tasks:
        r = s.explore(tasks.pop(), budget=max(1, run.counters.nodes // 3))
        nodes, found, tasks = nodes + r.counters.nodes, found | set(r.found), tasks + r.frontier
    assert nodes == run.counters.nodes and found == set(run.found)


def test_a_run_must_start_at_a_kept_child() -> None:
    s = searcher("rms_norm")
    kids, kept_list = s.kept_children(())
    kept = set(kept_list)
    pruned = [i for i in range(kids.listed) if i not in kept]  # a kernel node's indices run from 0
    with pytest.raises(SearchPathError, match="not a kept child"):
        s.explore(sibling_run((), kids.listed + 3))
    with pytest.raises(SearchPathError, match="not a kept child"):
        s.explore(sibling_run((), kept_list[0], kids.listed + 3))
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


def test_ranked_frontier_gives_each_task_its_first_entrys_rank() -> None:
    stack = [(0, 2, 5), (0, 2, 7), (0, 2, 9), (0, 4), (1,), (2,), (3,)]
    ranks = [5, 6, 7, 3, 1, 2, 3]
    tasks, task_ranks = ranked_frontier(stack, ranks)
    assert tasks == [sibling_run((0, 2), 5), (0, 4), (1,), (2,), (3,)] and task_ranks == [5, 3, 1, 2, 3]
    siblings = [(7, i) for i in range(3 * SPREAD)]
    tasks, task_ranks = ranked_frontier(siblings, list(range(100, 100 + 3 * SPREAD)))
    assert len(tasks) == SPREAD and task_ranks == [100 + 3 * k for k in range(SPREAD)]


def rank_of(s: Searcher, task: tuple[int, ...], below: int) -> int:
    """A task's rank below the first `below` steps of its path, from its parent's children: the sum
    of each step's place in exploration order (a run's: its first child's)."""
    run = split_run(task)
    path = task if run is None else (*run.parent, run.first)
    total = 0
    for depth in range(below, len(path)):
        kids, _ = s.kept_children(tuple(path[:depth]))
        at = kids.position(path[depth])
        assert at is not None
        total += at
    return total


@pytest.mark.parametrize(("name", "budget"), [("lora", 40), ("rms_norm", 30), ("gqa", 60)])
def test_a_frontier_tasks_rank_sums_its_steps_places_in_exploration_order(name: str, budget: int) -> None:
    """What the driver orders tasks by: each frontier task's rank is the sum, over its path's steps
    below the explored task, of each step's place among its kept siblings; a run's rank counts the
    place of its first child relative to the run's start."""
    s = searcher(name)
    r = s.explore((), budget=budget)
    assert r.frontier and len(r.ranks) == len(r.frontier)
    assert [rank_of(s, t, 0) for t in r.frontier] == r.ranks
    assert len(set(r.ranks)) > 1
    deeper = max((t for t in r.frontier if split_run(t) is None), key=len)
    below = s.explore(deeper, budget=budget)
    assert [rank_of(s, t, len(deeper)) for t in below.frontier] == below.ranks
    runs = [t for t in r.frontier if (run := split_run(t)) is not None]
    for t in runs[:2]:
        run = split_run(t)
        assert run is not None
        kids, _ = s.kept_children(run.parent)
        first = kids.position(run.first)
        assert first is not None
        inner = s.explore(t, budget=budget)
        expected = [rank_of(s, u, len(run.parent)) - first for u in inner.frontier]
        assert inner.ranks == expected
