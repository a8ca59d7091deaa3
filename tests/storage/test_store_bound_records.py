"""Records bound to their own store, and the root checksum over meta: two real stores of the same
run identity (the same program, config and budget, so the same run tag), and records copied from one
into the other. Every reader refuses them, naming the file, and `repair` finds and drops them, where
before they read as the store's own. A store made before stores had an id (schema 3) still opens and
resumes; an edited meta fails the root's checksum."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import pytest

from mugraph.storage.run.errors import StoreDamaged
from mugraph.storage.run.records import canonical_json
from mugraph.storage.run.repair import repair_store
from mugraph.storage.run.store import RunStore
from tests.helpers.run_store import confirmation, new_store, run_to_end


def made(path: Path) -> Path:
    with new_store(path) as st:
        run_to_end(st, limit=40)
        st.put_timeline(0, [{"wall": 0.5}])
        for d in sorted(st.found(0))[:2]:
            st.put_confirmation(0, d, confirmation(d))
    return path


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    """Stores A and B, each of a run of the same identity, each with two confirmations."""
    return made(tmp_path / "a.zarr"), made(tmp_path / "b.zarr")


def copy_record(src: Path, dst: Path, record: str) -> Path:
    shutil.rmtree(dst / record, ignore_errors=True)
    shutil.copytree(src / record, dst / record)
    return dst / record / "zarr.json"


def read_all(path: Path) -> None:
    with RunStore.open_existing(path) as st:
        for i in range(len(st.fragments())):
            st.found(i)
            st.confirmations(i)
        st.timeline()


@pytest.mark.parametrize("record", ["found", "confirmations", "tasks", "timeline/000000"])
def test_a_record_copied_from_another_store_of_the_same_run_is_damage(two: tuple[Path, Path], record: str) -> None:
    a, b = two
    if record in ("found", "confirmations"):
        record = f"{record}/0/{sorted(p.name for p in (a / record / '0').iterdir())[0]}"
    file = copy_record(b, a, record)
    with pytest.raises(StoreDamaged, match="copied from another store") as err:
        read_all(a)
    assert err.value.file == file


def test_repair_drops_a_found_record_copied_from_another_store(two: tuple[Path, Path]) -> None:
    a, b = two
    digest = sorted(p.name for p in (a / "found" / "0").iterdir())[0]
    for kind in ("found", "confirmations"):
        copy_record(b, a, f"{kind}/0/{digest}")
    report = repair_store(a)
    assert {d.record for d in report.plan.damage} == {f"found/0/{digest}", f"confirmations/0/{digest}"}
    assert f"found/0/{digest}" in report.plan.drop and report.plan.rerun
    read_all(a)  # what is left is the store's own
    assert repair_store(a).summary().endswith("nothing to repair")


def test_a_store_made_before_stores_had_an_id_opens_and_resumes(tmp_path: Path) -> None:
    """Schema 3: no id in the root, its checksum over format, schema and identity, its records
    sealed over their own JSON alone."""
    path = made(tmp_path / "old.zarr")
    for file in sorted(path.rglob("zarr.json")):
        meta = json.loads(file.read_text())
        attrs = meta.get("attributes", {})
        if file == path / "zarr.json":
            del attrs["store"]
            attrs["schema"] = 3
            scope = {k: attrs[k] for k in ("format", "schema", "identity")}
            attrs["crc32"] = zlib.crc32(canonical_json(scope).encode())
        elif "crc32" in attrs:
            body = {k: v for k, v in attrs.items() if k != "crc32"}
            attrs["crc32"] = zlib.crc32(canonical_json(body).encode())
        file.write_text(json.dumps(meta))
    read_all(path)
    with new_store(path) as st:  # resumed by its writer, and still of schema 3
        st.put_timeline(1, [{"wall": 1.0}])
    read_all(path)
    assert json.loads((path / "zarr.json").read_text())["attributes"]["schema"] == 3


def test_an_edited_meta_fails_the_root_checksum(tmp_path: Path) -> None:
    """The recorded command (what `resume` and the report say) is under the root's checksum."""
    path = made(tmp_path / "s.zarr")
    file = path / "zarr.json"
    meta = json.loads(file.read_text())
    meta["attributes"]["meta"]["argv"] = ["mugraph", "optimize", "elsewhere.py"]
    file.write_text(json.dumps(meta))
    with pytest.raises(StoreDamaged, match="checksum mismatch in the root attributes") as err:
        RunStore.open_existing(path)
    assert err.value.file == file
