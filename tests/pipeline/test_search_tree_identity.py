"""A store whose frontier names nodes of another search tree is refused, never resumed.

Resuming one would hand workers paths whose kept siblings differ under this release's tree; the run
identity carries the tree's version so that such a store fails on open with the difference named."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.pipeline.plan import make_plan
from mugraph.programs import get_builtin
from mugraph.stages.search.explore import SEARCH_TREE
from mugraph.storage.run.errors import StoreMismatch
from mugraph.storage.run.store import RunStore


def test_a_store_of_another_search_tree_is_refused_with_the_difference_named(tmp_path: Path) -> None:
    plan = make_plan(get_builtin("rms_norm"), None, {}, 10_000)
    assert plan.identity["search_tree"] == SEARCH_TREE
    older = {k: v for k, v in plan.identity.items() if k != "search_tree"}  # as a release before the field wrote it
    store = tmp_path / "run.zarr"
    with RunStore.open(store, older):
        pass
    with pytest.raises(StoreMismatch, match=r"search_tree: stored '\(none\)'.*--fresh"):
        RunStore.open(store, plan.identity)
    with RunStore.open(store, older) as st:  # refused, not changed
        assert st.identity == older
