"""The search skips a block graph only when it can no longer close.

Explored here with the check turned off, every block node of a narrowed search is marked with
whether any block graph closes below it. The check must never reject one that closes (else a
μGraph could be lost), must reject some that do not (else it does nothing), and its fast per-child
form must agree with the direct count on the child's own state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from mugraph.programs import get_builtin
from mugraph.stages.search import expand
from mugraph.stages.search.config import SearchConfig, preset_config
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.state import State
from mugraph.stages.search.viable import close_slack
from tests.stages.search.test_regression import NARROW


def _searcher(name: str, kernel_ops: bool = False) -> Searcher:
    """The narrowed search of the default suite; with `kernel_ops`, with the preset's pre-defined
    kernel ops too (the narrowed searches have none)."""
    overrides: dict[str, Any] = NARROW[name]["overrides"]
    if kernel_ops:
        overrides = {k: v for k, v in overrides.items() if k != "kernel_ops"}
    config = preset_config(get_builtin(name).preset).with_overrides(overrides)
    return Searcher(Fragment(get_builtin(name).reference(), config, name))


Viable = Callable[[expand.ChildList, SearchConfig, int], "list[bool] | None"]


@dataclass
class Walk:
    """What a walk of the whole tree the oracle leaves saw."""

    block_nodes: list[tuple[State, bool]] = field(default_factory=list)  # with: a block graph closes below
    count_rejects: list[bool] = field(default_factory=list)  # per kernel graph the count rejects: a candidate below
    compared: int = 0  # block children whose fast verdict was checked against `close_slack`


def _walk(searcher: Searcher, fast: Viable) -> Walk:
    cfg = searcher.fragment.config
    outputs = len(searcher.fragment.output_names)
    seen = Walk()

    def visit(state: State) -> tuple[bool, bool]:
        """(a block graph closes below, a candidate is at or below)."""
        candidate = state.block is None and len(state.unconsumed()) == outputs
        kids = expand.child_list(state, cfg)
        viable = fast(kids, cfg, outputs)
        closes = False
        for i in searcher._kept(kids):
            child = kids[i].build()
            if child.block is None:
                closes = closes or state.block is not None
            elif child.block.configured and state.block is not None and viable is not None:
                assert viable[i] == (close_slack(child.block, cfg) >= 0), child.label
                seen.compared += 1
            below, found = visit(child)
            closes = closes or below
            candidate = candidate or found
            rejected = viable is not None and not viable[i]
            if rejected and (state.block is None or child.block is None):  # a kernel graph's count
                seen.count_rejects.append(found)
        if state.block is not None and state.block.configured:
            seen.block_nodes.append((state, closes))
        return closes and state.block is not None, candidate

    visit(searcher.fragment.root)
    return seen


@pytest.mark.parametrize("name", ["lora", "gated_mlp"])
def test_the_close_check_rejects_only_block_graphs_that_never_close(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    searcher = _searcher(name)
    cfg = searcher.fragment.config
    fast = expand.ChildList.viable
    monkeypatch.setattr(expand.ChildList, "viable", lambda self, cfg, outputs: None)  # explore every child
    seen = _walk(searcher, fast)
    blocks = [(s.block, closes) for s, closes in seen.block_nodes if s.block is not None]
    rejected = [closes for block, closes in blocks if close_slack(block, cfg) < 0]
    assert len(seen.block_nodes) > 1000 and len(rejected) > 100
    assert not any(rejected), "the check rejected a block graph that closes"
    assert seen.compared > 100


@pytest.mark.parametrize(("name", "kernel_ops"), [("gated_mlp", True), ("lora", False)])
def test_the_count_check_rejects_only_kernel_steps_with_no_candidate_below(
    name: str, kernel_ops: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = _searcher(name, kernel_ops)
    fast = expand.ChildList.viable
    monkeypatch.setattr(expand.ChildList, "viable", lambda self, cfg, outputs: None)
    seen = _walk(searcher, fast)
    assert len(seen.count_rejects) > 100
    assert not any(seen.count_rejects), "the count rejected a kernel graph with a candidate at or below it"
