"""Counting rejects a child only when no candidate lies at or below it.

A narrowed search's whole tree (what the oracle leaves) is walked with the checks turned off, and
every child they would reject is marked with whether a candidate (a kernel graph with as many
unconsumed tensors as the reference has outputs) lies at or below it. None may (else a μGraph could
be lost); each kind of check must reject some (else it does nothing); and the fast per-child form
of the block check must agree with `close_slack` on the child's own state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import pytest

from mugraph.ir.limits import DEFAULT_LIMITS
from mugraph.programs import get_builtin
from mugraph.stages.search import expand
from mugraph.stages.search.config import SearchConfig, preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.macro_counts import macro_count, macro_listed
from mugraph.stages.search.macros import MacroEntry, macro_entries
from mugraph.stages.search.state import State, TInfo
from mugraph.stages.search.viable import BlockDebts, _pays, close_slack
from tests.helpers.narrow import NARROW_RESULTS


def _kept(searcher: Searcher, kids: expand.ChildList) -> list[int]:
    """The children the instantiated tree explores (counting, then the oracle)."""
    cfg, outputs = searcher.fragment.config, len(searcher.fragment.output_names)
    return expand.kept_indices(kids, cfg, outputs, searcher.oracle.kept)


def _searcher(name: str, kernel_ops: bool = False) -> Searcher:
    """The narrowed search of the default suite; with `kernel_ops`, with the preset's pre-defined
    kernel ops too (the narrowed searches have none)."""
    overrides: dict[str, Any] = NARROW_RESULTS[name]["overrides"]
    if kernel_ops:
        overrides = {k: v for k, v in overrides.items() if k != "kernel_ops"}
    config = preset_config(get_builtin(name).preset).with_overrides(overrides)
    return Searcher(Fragment(get_builtin(name).reference(), config, name))


Viable = Callable[[expand.ChildList, SearchConfig, int], "list[bool] | None"]


@dataclass
class Walk:
    """What a walk of the whole tree the oracle leaves saw."""

    rejects: dict[str, list[bool]] = field(default_factory=dict)  # per kind of child: a candidate at or below?
    compared: int = 0  # block children whose fast verdict was checked against `close_slack`


def _walk(searcher: Searcher, fast: Viable) -> Walk:
    cfg = searcher.fragment.config
    outputs = len(searcher.fragment.output_names)
    seen = Walk()

    def visit(state: State) -> bool:
        """Whether a candidate is at or below `state`."""
        candidate = state.block is None and len(state.unconsumed()) == outputs
        kids = expand.child_list(state, cfg)
        viable = fast(kids, cfg, outputs)
        for i in _kept(searcher, kids):
            child = kids[i].build()
            if state.block is not None and child.block is not None and viable is not None:
                assert viable[i] == (close_slack(state, child.block, cfg, outputs) >= 0), child.label
                seen.compared += 1
            found = visit(child)
            candidate = candidate or found
            if viable is not None and not viable[i]:
                kind = "kernel" if state.block is None else "close" if child.block is None else "block"
                seen.rejects.setdefault(kind, []).append(found)
        return candidate

    visit(searcher.fragment.root)
    return seen


@pytest.mark.parametrize(("name", "kernel_ops"), [("lora", False), ("gated_mlp", False), ("gated_mlp", True)])
def test_counting_rejects_only_children_with_no_candidate_at_or_below(
    name: str, kernel_ops: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = _searcher(name, kernel_ops)
    fast = expand.ChildList.viable
    monkeypatch.setattr(expand.ChildList, "viable", lambda self, cfg, outputs: None)  # explore every child
    seen = _walk(searcher, fast)
    assert not [kind for kind, found in seen.rejects.items() if any(found)], "a rejected child had a candidate"
    assert len(seen.rejects.get("block", [])) > 100 and seen.compared > 100
    if kernel_ops:
        assert len(seen.rejects.get("kernel", [])) > 100
    if name == "lora":
        assert len(seen.rejects.get("close", [])) > 100


def test_a_barren_node_lists_its_children_only_when_asked() -> None:
    """A block node that counting shows has no child worth exploring lists none
    (`expand.Barren`), and when asked, as many children as the full listing, none of them
    viable there, and the same children (terms and states). Its macros, listed without extending
    its table, are those the extended table lists."""
    searcher = _searcher("lora")
    cfg = searcher.fragment.config
    outputs = len(searcher.fragment.output_names)
    seen = {"barren": 0, "listed": 0, "nodes": 0, "paid": 0, "counted": 0, "debts": 0}

    def visit(make: Callable[[], State]) -> None:
        kids = expand.child_list(make(), cfg, outputs)
        full = expand.child_list(make(), cfg)
        seen["nodes"] += 1
        assert len(kids) == len(full)
        a, b = make().block, make().block
        if a is not None and a.configured and b is not None:
            room = DEFAULT_LIMITS.smem_bytes - a.smem
            old, new = macro_listed(a, room)
            assert sorted([(e[0], e[1]) for e in old] + new) == [(e[0], e[1]) for e in macro_entries(b, room)]
            assert all(len(a.tensors) - 1 not in e[0] for e in old) and all(len(a.tensors) - 1 in e[0] for e in new)
            listed = macro_entries(b, room)
            pays_pre, pays_loose = _pays(a, cfg)
            for need_pre, need_loose in product(range(-1, 6), range(6)):
                want = _paid(a.tensors, listed, pays_pre, pays_loose, need_pre, need_loose)
                assert macro_count(a, room, pays_pre, pays_loose, need_pre, need_loose) == want
                pays = macro_count(a, room, pays_pre, pays_loose, need_pre, need_loose, counted=False) is None
                assert pays == (want is None)
                seen["paid" if want is None else "counted"] += 1
        if a is not None and a.configured:
            _debts_agree(make(), cfg, outputs, kids, full)
            seen["debts"] += 1
        if kids.barren:
            seen["barren"] += 1
            viable = full.viable(cfg, outputs)
            assert viable is not None and not any(viable)
            if seen["listed"] < 40 and len(full):
                seen["listed"] += 1
                assert kids.news == full.news
                assert [k.build().label for k in kids] == [k.build().label for k in full]
            return
        for i in _kept(searcher, full):
            visit(full[i].build)

    visit(lambda: searcher.fragment.root)
    assert seen["barren"] > 100 and seen["listed"] == 40, seen
    assert seen["paid"] > 100 and seen["counted"] > 100, seen
    assert seen["debts"] > 1000, seen


def _debts_agree(state: State, cfg: SearchConfig, outputs: int, kids: expand.ChildList, full: expand.ChildList) -> None:
    """`BlockDebts`, worked out once for a structure, gives the verdicts `block_barren` and
    `block_viable` give the instantiation itself: on barrenness, and on every listed child."""
    b = state.block
    assert b is not None
    debts = BlockDebts(state, b, cfg, outputs)
    room = DEFAULT_LIMITS.smem_bytes - b.smem
    closes = any(k.build().block is None for k in full)
    if b.op_count < cfg.max_block_ops:
        assert debts.barren_row(b, cfg, closes, room) == kids.barren
    viable = full.viable(cfg, outputs)
    mine = []
    for k in full:
        child = k.build()
        if child.block is None:
            mine.append(debts.closed_ok)
            continue
        nb = child.block
        ins = nb.ops[-1].inputs
        flag = nb.tensors[-1].after_accum
        mine.append(debts.macro_ok(ins, flag) if len(ins) == 4 else debts.entry_ok(ins, flag))
    assert mine == (viable if viable is not None else [True] * len(full))


def _paid(
    tensors: tuple[TInfo, ...],
    listed: list[MacroEntry],
    pays_pre: list[int],
    pays_loose: list[int],
    need_pre: int,
    need_loose: int,
) -> int | None:
    """`macro_count` one macro at a time: None if one of `listed` pays, else how many there are."""
    for (a, b, c, d), _, _ in listed:
        if sum(pays_loose[i] for i in (a, b, c, d)) >= need_loose and sum(
            pays_pre[i] for i in (a, b, c, d)
        ) >= need_pre + (not tensors[a].after_accum):
            return None
    return len(listed)
