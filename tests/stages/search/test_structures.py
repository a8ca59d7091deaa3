"""The structure tree's two ways to make a child agree, and its rows are the instantiated tree's.

`block_expansion` lists and judges all of a block node's children at once; `block_child` makes the
one a replayed path names. A worker resuming a task replays its path, so the rows each makes must
be the same, and the instantiated tree (`expand.child_list`) must hold exactly the structure
tree's rows as its states.
"""

from __future__ import annotations

from typing import Any

import pytest

from mugraph.programs import get_builtin
from mugraph.stages.search import structures as S
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.expand import child_list, kept_indices
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.nodes import BlockNode, Node
from mugraph.stages.search.serial import run_search
from mugraph.stages.search.state import State
from mugraph.stages.search.structures import block_child


def _searcher(name: str, **overrides: Any) -> Searcher:
    cfg = preset_config(get_builtin(name).preset).with_overrides(overrides)
    return Searcher(Fragment(get_builtin(name).reference(), cfg, name))


def _rows(node: Node) -> object:
    if isinstance(node, BlockNode):
        return [(b.grid, b.imaps, b.forloop, b.inputs, b.ops, b.tensors, b.uses, b.smem) for b in node.rows]
    return (node.tensors, node.ops, node.label)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [("rms_norm", {}), ("lora", {"kernel_ops": [], "grids": [[64, 1, 1]], "franges": [16]})],
)
def test_a_replayed_child_has_the_rows_its_parents_expansion_gave(name: str, overrides: dict[str, Any]) -> None:
    s = _searcher(name, **overrides)
    cfg, outputs = s.fragment.config, len(s.fragment.output_names)
    stack: list[Node] = [s.fragment.root]
    checked = 0
    while stack and checked < 3000:
        node = stack.pop()
        expansion = s.expansion(node)
        kids = [lazy.build() for lazy in expansion.lazy]
        if isinstance(node, BlockNode):
            for index, kid in zip(expansion.kept, kids, strict=True):
                again = block_child(node, index, cfg, outputs, s.oracle.kept)
                assert again is not None and _rows(again) == _rows(kid), index
                checked += 1
            unkept = {i + 1 for i in expansion.kept} - set(expansion.kept)
            assert all(block_child(node, i, cfg, outputs, s.oracle.kept) is None for i in unkept)
        stack += reversed(kids)
    assert checked > 1000


def test_the_rows_are_the_instantiated_trees_states() -> None:
    """Walked in full, rms_norm's narrowed structure tree and the instantiated tree expand the same
    states: every row, and every kernel-level state, once (the instantiated tree's steps that open a
    block graph before its for-loop aside)."""
    overrides = {"grids": [[64, 1, 1]], "franges": [64], "kernel_ops": [], "imaps": [[-1, -1, -1], [1, -1, -1]]}
    s = _searcher("rms_norm", **overrides)
    cfg, outputs = s.fragment.config, len(s.fragment.output_names)

    def key(state: State) -> object:
        b = state.block
        block = None if b is None else (b.sources, b.grid, b.imaps, b.forloop, b.inputs, b.ops)
        return (state.ops, block)

    mine: list[object] = []
    stack: list[Node] = [s.fragment.root]
    while stack:
        node = stack.pop()
        if isinstance(node, BlockNode):
            st = node.state
            mine += [key(State(st.tensors, st.uses, st.ops, st.last, st.dmem, b)) for b in node.rows]
        else:
            mine.append(key(node))
            if s.verify(node, ()) is not None:
                continue
        stack += reversed([lazy.build() for lazy in s.expansion(node).lazy])
    theirs: list[object] = []
    states: list[State] = [s.fragment.root]
    while states:
        state = states.pop()
        if state.block is None or state.block.configured:
            theirs.append(key(state))
        if state.block is None and s.verify(state, ()) is not None:
            continue
        kids = child_list(state, cfg, outputs)
        states += reversed([kids[i].build() for i in kept_indices(kids, cfg, outputs, s.oracle.kept)])
    assert len(mine) == len(set(mine)) > 100
    assert sorted(map(repr, mine)) == sorted(map(repr, theirs))


def test_a_node_barren_by_counting_alone_counts_the_rows_it_is_made_without(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block op or macro child that counting shows barren whatever its sizes is made with its
    first row and counted with all of them: the search's counts, finds and frontiers are those of
    the tree that makes and goes through every row (lora's: three fifths of its rows are in such
    nodes)."""
    name = "lora"
    made: list[BlockNode] = []
    real_op, real_macro = S._op_child, S._macro_child

    def op_child(*args: Any) -> BlockNode:
        made.append(real_op(*args))
        return made[-1]

    def macro_child(*args: Any) -> BlockNode:
        made.append(real_macro(*args))
        return made[-1]

    monkeypatch.setattr(S, "_op_child", op_child)
    monkeypatch.setattr(S, "_macro_child", macro_child)
    short = run_search(_searcher(name), 10_000, stop=lambda r: r.tasks >= 40)
    elided = [n for n in made if n.size != len(n.rows)]
    assert len(elided) > 20 and all(len(n.rows) == 1 and n.size > 1 for n in elided)
    monkeypatch.setattr(S, "_barren", lambda *args: False)  # every row made and gone through
    full = run_search(_searcher(name), 10_000, stop=lambda r: r.tasks >= 40)
    keys = ("nodes", "block_nodes", "kernel_nodes", "structures", "children", "pruned")
    assert [getattr(short.counters, k) for k in keys] == [getattr(full.counters, k) for k in keys]
    assert sorted(short.found) == sorted(full.found) and short.frontier == full.frontier
