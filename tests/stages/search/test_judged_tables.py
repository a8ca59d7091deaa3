"""A search's block op tables hold the ops whose terms its oracle keeps, each table made once.

`BlockTables` drops the entries whose terms the oracle prunes (asking it once per op and search)
and hands one table to every graph that extends the same table with the same tensors. Checked
against tables made from scratch without a judge, and against block expansions made without the
search's tables: the same children.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from mugraph.programs import get_builtin
from mugraph.stages.search.block_tables import BlockTables
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.nodes import BlockNode, Node
from mugraph.stages.search.op_tables import block_table
from mugraph.stages.search.state import ENTRY_NEW, TYPE_ORDER, Entry, OpenBlock, OpTable, Rank
from mugraph.stages.search.structures import block_expansion


def _searcher(name: str, **overrides: Any) -> Searcher:
    cfg = preset_config(get_builtin(name).preset).with_overrides(overrides)
    return Searcher(Fragment(get_builtin(name).reference(), cfg, name))


def _live(table: OpTable, s: Searcher, last: Rank) -> list[list[Entry]]:
    """The table's entries ranked above `last`, kind by kind."""
    kinds = s.fragment.config.block_ops
    return [
        [e for e in entries if (e[0], TYPE_ORDER[k]) > last] for k, entries in zip(kinds, table.entries, strict=True)
    ]


def _bare(b: OpenBlock) -> OpenBlock:
    """`b` without the tables it carries."""
    return replace(b, table=None, macros=None, outlook=None)


def _walk(s: Searcher, limit: int) -> list[BlockNode]:
    """Block nodes of the search tree, depth first, every kept child expanded (up to `limit`)."""
    out: list[BlockNode] = []
    stack: list[Node] = [s.fragment.root]
    while stack and len(out) < limit:
        node = stack.pop()
        kids = [lazy.build() for lazy in s.expansion(node).lazy]
        if isinstance(node, BlockNode) and node.rows:
            out.append(node)
        stack += reversed(kids)
    return out


@pytest.mark.parametrize("name", ["lora", "gqa"])
def test_a_searchs_tables_hold_exactly_the_ops_its_oracle_keeps(name: str) -> None:
    s = _searcher(name)
    cfg = s.fragment.config
    checked = dropped = 0
    for node in _walk(s, 600):
        for b in node.rows[:2]:
            if b.table is None or b.table.n < len(b.tensors):
                continue
            full = _live(block_table(_bare(b), cfg), s, b.last)
            keep = s.oracle.kept(dict.fromkeys(e[ENTRY_NEW][0] for es in full for e in es))
            want = [[e for e in es if e[ENTRY_NEW][0] in keep] for es in full]
            assert _live(b.table, s, b.last) == want
            checked += 1
            dropped += sum(map(len, full)) - sum(map(len, want))
    assert checked > 100 and dropped > 1000, (checked, dropped)


def test_a_table_made_again_lists_the_same_and_a_graphs_own_is_kept() -> None:
    """Made twice for one graph (no table of its own), the listing is the same; a graph whose own
    table covers its tensors keeps it."""
    s = _searcher("gqa")
    tables = BlockTables(s.oracle.kept)
    node = _walk(s, 50)[-1]
    b = node.rows[0]
    first = tables.table(_bare(b), s.fragment.config)
    again = tables.table(_bare(b), s.fragment.config)
    assert again is not first and again.entries == first.entries and again.n == len(b.tensors)
    own = _bare(b)
    own.table = first
    assert tables.table(own, s.fragment.config) is first


def test_the_judge_hears_an_op_once_per_search() -> None:
    """An extension met again with the same operands (made again, the verdicts kept) asks the
    judge nothing and makes the same table; an operand tuple whose ops are all pruned holds none."""
    s = _searcher("lora")
    heard: list[int] = []

    def judge(terms: dict[Any, None]) -> set[Any]:
        heard.append(len(terms))
        return s.oracle.kept(terms)

    tables = BlockTables(judge)
    cfg = s.fragment.config
    nodes = _walk(s, 80)
    firsts = [tables.table(_bare(node.rows[0]), cfg) for node in nodes]
    asked = sum(heard)
    assert asked > 0 and () in tables.verdicts.values()
    again = [tables.table(_bare(node.rows[0]), cfg) for node in nodes]
    assert sum(heard) == asked
    assert [t.entries for t in again] == [t.entries for t in firsts]


@pytest.mark.parametrize(
    ("name", "overrides"),
    [("lora", {}), ("gqa", {}), ("rms_norm", {})],
)
def test_expansions_with_and_without_the_tables_agree(name: str, overrides: dict[str, Any]) -> None:
    """The same kept children, with the same rows, from judged shared tables as from tables made
    afresh for each node without a judge; fewer listed with them (the pruned ops are not listed)."""
    s = _searcher(name, **overrides)
    cfg, outputs = s.fragment.config, len(s.fragment.output_names)
    fewer = 0
    for node in _walk(s, 200):
        mine = block_expansion(node, cfg, outputs, s.oracle.kept, s.tables)
        bare = BlockNode(node.state, node.sources, tuple(map(_bare, node.rows)), node.label)
        theirs = block_expansion(bare, cfg, outputs, s.oracle.kept)
        assert mine.kept == theirs.kept and mine.kept_rows == theirs.kept_rows
        for index in mine.kept[-3:]:
            a, b = mine.child(index), theirs.child(index)
            assert isinstance(a, BlockNode) == isinstance(b, BlockNode)
            if isinstance(a, BlockNode) and isinstance(b, BlockNode):
                assert [(r.grid, r.imaps, r.forloop, r.ops, r.tensors) for r in a.rows] == [
                    (r.grid, r.imaps, r.forloop, r.ops, r.tensors) for r in b.rows
                ]
        fewer += mine.listed < theirs.listed
    assert fewer > 20, fewer
