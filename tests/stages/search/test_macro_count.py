"""The one-pass macro check of a block node agrees with checking its listed macros one by one.

`viable.block_barren` asks `macros.macro_count` whether any macro a node lists pays what a viable
child must, and else how many it lists, without listing them. Budgeted walks of a few subtrees of
lora's default space (whose block graphs meet far more shapes than the narrowed tree of the
default suite) check every such answer against the node's macros listed from an extended table.
"""

from __future__ import annotations

import dataclasses

import pytest

from mugraph.programs import get_builtin
from mugraph.stages.search import macros
from mugraph.stages.search.config import preset_config
from mugraph.stages.search.expand import child_list, find_instance, kept_indices
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.macro_counts import macro_count
from mugraph.stages.search.state import OpenBlock, State

# Nodes of lora's default space (in the instantiated tree, `expand.child_list`'s) below which the
# fast path meets quadruples of every kind: ranked below the last op or not, paying or not.
STARTS = [
    [
        "open(grid=[256, 1, 1],imaps=[[1, -1, -1], [1, -1, -1], [0, -1, -1], [1, -1, -1]])",
        "loop(fmaps=[-1, 0, -1, -1],F=16)",
    ],
    [
        "open(grid=[16, 1, 1],imaps=[[-1, -1, -1], [1, -1, -1], [1, -1, -1], [1, -1, -1]])",
        "loop(fmaps=[0, 1, 0, 1],F=16)",
    ],
    [
        "open(grid=[16, 1, 1],imaps=[[1, -1, -1], [1, -1, -1], [0, -1, -1], [-1, -1, -1]])",
        "loop(fmaps=[-1, 1, 1, 1],F=16)",
    ],
    ["open(grid=[16, 1, 1],imaps=[[0, -1, -1], [0, -1, -1], [-1, -1, -1], [0, -1, -1]])"],
]


def _walk(searcher: Searcher, start: State, budget: int) -> None:
    """Depth first over the instantiated tree below `start`, as the search explores it, for at
    most `budget` nodes."""
    cfg, outputs = searcher.fragment.config, len(searcher.fragment.output_names)
    stack = [start]
    for _ in range(budget):
        if not stack:
            return
        state = stack.pop()
        kids = child_list(state, cfg, outputs)
        stack += [kids[i].build() for i in reversed(kept_indices(kids, cfg, outputs, searcher.oracle.kept))]


def test_macro_count_matches_the_listed_macros(monkeypatch: pytest.MonkeyPatch) -> None:
    prog = get_builtin("lora")
    searcher = Searcher(Fragment(prog.reference(), preset_config(prog.preset), "lora"))
    seen = {"paid": 0, "counted": 0}

    def checked(
        b: OpenBlock,
        room: int,
        pays_pre: list[int],
        pays_loose: list[int],
        need_pre: int,
        need_loose: int,
        counted: bool = True,
    ) -> int | None:
        got = macro_count(b, room, pays_pre, pays_loose, need_pre, need_loose)
        asked = macro_count(b, room, pays_pre, pays_loose, need_pre, need_loose, counted)
        listed = macros.macro_entries(dataclasses.replace(b), room)  # a copy's table is extended
        want: int | None = len(listed)
        for (a, c, d, f), _, _ in listed:
            if sum(pays_loose[i] for i in (a, c, d, f)) >= need_loose and sum(
                pays_pre[i] for i in (a, c, d, f)
            ) >= need_pre + (not b.tensors[a].after_accum):
                want = None
                break
        assert got == want, (b.ops, b.last, room, need_pre, need_loose)
        assert (asked is None) == (want is None), (b.ops, b.last, room, need_pre, need_loose, counted)
        seen["paid" if want is None else "counted"] += 1
        return asked

    monkeypatch.setattr("mugraph.stages.search.viable.macro_count", checked)
    for labels in STARTS:
        _walk(searcher, find_instance(searcher.fragment.root, searcher.fragment.config, labels), 3000)
    assert seen["paid"] > 10 and seen["counted"] > 1000, seen
