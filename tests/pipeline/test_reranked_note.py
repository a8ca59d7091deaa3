"""A finished store ranked by an earlier cost model is ranked again by the run that reuses it; where
the choice changes, the run says what the store's ranking chose, rather than changing it silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mugraph.dashboards.console import verdict_lines
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import done, mugraph, optimize_args

OLD_MODEL = "emitted-v0-an-earlier-version"


def _age_ranking(store: Path) -> dict[str, Any]:
    """The stored ranking as an earlier version could have left it: another model's name on every row
    and its first two rows swapped. Returns the row it now puts first."""
    with RunStore.open_existing(store, readonly=False) as st:
        rows = [dict(r) for r in st.ranking(0) or []]
        assert len(rows) >= 2, rows
        aged = [rows[1], rows[0], *rows[2:]]
        st.put_ranking(0, [{**r, "model": OLD_MODEL} for r in aged])
    return aged[0]


@pytest.mark.slow  # two lora runs: about 19 s
def test_a_choice_changed_by_the_cost_model_is_said(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    args = optimize_args("rms_norm", store, "--workers", "1", "--memo-url", "local")
    first = done(mugraph(*args, cwd=tmp_path))
    assert first["complete"] and "reranked" not in first
    best = first["best_per_fragment"]["f0"]
    was = _age_ranking(store)
    assert was["digest"] != best

    again = done(mugraph(*args, cwd=tmp_path))  # ranked again: the stored rows are another model's
    assert again["best_per_fragment"]["f0"] == best
    assert again["reranked"] == {
        "f0": {"was_model": OLD_MODEL, "was": was["digest"], "was_reference": bool(was["reference"])}
    }

    said = [line.strip() for line in verdict_lines(again, "H100") if "ranked again" in line]  # as the summary prints
    model = again["reference"]["f0"]["model"]
    before = "the reference" if was["reference"] else f"μGraph {was['digest'][:16]}"
    assert said == [f"ranked again by cost model {model}: the store's ranking, by {OLD_MODEL}, chose {before}"]

    third = done(mugraph(*args, cwd=tmp_path))  # read back as ranked: nothing changed, nothing said
    assert "reranked" not in third and third["best_per_fragment"]["f0"] == best
