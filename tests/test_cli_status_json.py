"""`status --json` says at the top whether the run's best is the reference program (`best_is_reference`,
beside `best`, which is a digest either way), so a script need not look through the fragments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mugraph.cli import main
from mugraph.storage.run.store import RunStore
from mugraph.storage.run.task_records import FoundRecord, TaskCompletion
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G
from tests.helpers.run_store import FRAGMENTS, confirmation, layout, new_store


def _row(key: str, seconds: float, reference: bool = False) -> dict[str, Any]:
    return {"digest": D(key), "estimated_seconds": seconds, "reference": reference, "profile": "H100"}


def _status(store: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["status", str(store), "--json"])
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("fast_in", [(), (1,), (0, 1)])
def test_best_is_reference_only_where_every_fragment_keeps_its_reference(
    fast_in: tuple[int, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "run.zarr"
    with new_store(store) as st:
        st.set_fragments(FRAGMENTS[:2])  # each fragment's reference graph is graph_of("reference")
        for f, root in enumerate(st.add_tasks([(0, (), -1), (1, (), -1)])):
            found = [FoundRecord(f, D("fast"), (), G("fast"), root, 1.0, 10)]
            st.complete_tasks([TaskCompletion(root, {}, "w", found, [])])
            st.put_confirmation(f, D("fast"), confirmation(D("fast")))
            st.put_layout(f, D("fast"), layout(D("fast")))
            ranking = [_row("reference", 4e-6, reference=True), _row("fast", 1e-6 if f in fast_in else 8e-6)]
            st.put_ranking(f, sorted(ranking, key=lambda r: r["estimated_seconds"]))
    assert _status(store, capsys)["best_is_reference"] is False  # no final record yet: no best
    with RunStore.open_existing(store, readonly=False) as st:
        st.put_final({"complete": True, "best": D("whole"), "best_per_fragment": {}, "mugraphs": [D("fast")]})
    out = _status(store, capsys)
    assert out["best"] == D("whole")
    assert [f["best_is_reference"] for f in out["fragments"]] == [f not in fast_in for f in range(2)]
    assert out["best_is_reference"] is (not fast_in), out
