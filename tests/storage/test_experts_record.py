"""The experts record of a Zarr run store: damage to it is named as damage to every other record is,
a resealed record of the wrong shape too (`show` prints its labels), and `repair` drops it alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mugraph.storage.run.errors import StoreDamaged
from mugraph.storage.run.ledger import LEDGER_NAME
from mugraph.storage.run.records import CRC_KEY, seal
from mugraph.storage.run.repair import repair_store
from mugraph.storage.run.store import RunStore
from tests.helpers.graphs import digest_of as D
from tests.helpers.run_store import COUNTERS, FRAGMENTS, IDENTITY, new_store
from tests.helpers.store_edits import store_key

EXPERTS: list[Any] = [{"label": "mine", "digest": D("a0")}, {"label": "wide", "digest": D("a1")}]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.zarr"
    with new_store(path) as st:
        st.set_fragments(FRAGMENTS[:1])
        st.put_experts(EXPERTS)
    return path


def resealed(store: Path, experts: Any) -> None:
    """The record's experts replaced, its checksum recomputed (anyone can)."""
    file = store / "experts" / "zarr.json"
    meta = json.loads(file.read_text())
    attrs = {k: v for k, v in meta["attributes"].items() if k != CRC_KEY}
    meta["attributes"] = seal({**attrs, "experts": experts}, store_key(store))
    file.write_text(json.dumps(meta))


def test_the_record_is_read_back_and_committed(store: Path) -> None:
    with RunStore.open_existing(store) as st:
        assert st.experts() == EXPERTS
    assert '"record": "experts"' in (store / LEDGER_NAME).read_text()


@pytest.mark.parametrize(
    "experts",
    [
        "mine",
        [{"label": "mine"}],
        [{"label": 3, "digest": D("a0")}],
        [{"label": "\x1b[31mred", "digest": D("a0")}],
        [{"label": "mine", "digest": "../../x"}],
    ],
    ids=["not-a-list", "no-digest", "label-not-text", "label-with-control", "digest-not-a-name"],
)
def test_a_resealed_record_of_the_wrong_shape_is_damage_naming_its_file(store: Path, experts: Any) -> None:
    resealed(store, experts)
    with RunStore.open_existing(store) as st, pytest.raises(StoreDamaged) as err:
        st.experts()
    assert err.value.file == store / "experts" / "zarr.json"


def test_a_record_copied_from_another_runs_store_is_damage(store: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.zarr"
    with RunStore.open(other, {**IDENTITY, "budget": "2"}, counter_names=COUNTERS) as st:
        st.put_experts(EXPERTS)
    (store / "experts" / "zarr.json").write_bytes((other / "experts" / "zarr.json").read_bytes())
    with RunStore.open_existing(store) as st, pytest.raises(StoreDamaged, match="copied from another store"):
        st.experts()
    meta = json.loads((other / "experts" / "zarr.json").read_text())  # resealed for this store: its run tag tells
    attrs = {k: v for k, v in meta["attributes"].items() if k != CRC_KEY}
    meta["attributes"] = seal(attrs, store_key(store))
    (store / "experts" / "zarr.json").write_text(json.dumps(meta))
    with RunStore.open_existing(store) as st, pytest.raises(StoreDamaged, match="written for another run"):
        st.experts()


@pytest.mark.parametrize("how", ["tampered", "deleted"])
def test_repair_drops_a_damaged_record_alone(store: Path, how: str) -> None:
    file = store / "experts" / "zarr.json"
    if how == "tampered":
        meta = json.loads(file.read_text())
        meta["attributes"]["experts"][0]["label"] = "other"  # without its checksum
        file.write_text(json.dumps(meta))
        with RunStore.open_existing(store) as st, pytest.raises(StoreDamaged, match="checksum"):
            st.experts()
    else:
        shutil.rmtree(store / "experts")
        with pytest.raises(StoreDamaged, match="missing, though the run committed it"):
            RunStore.open_existing(store)
    report = repair_store(store)
    assert report.plan.drop == ["experts"] and "dropped the experts record" in report.summary()
    with RunStore.open_existing(store) as st:
        assert st.experts() is None and st.fragments() == FRAGMENTS[:1]
    assert '"record": "experts"' not in (store / LEDGER_NAME).read_text()
