"""`repair` on a real run store on disk: each kind of damage found, the intact records kept, the store
opening clean afterwards with the right tasks set to run again, and those tasks' reruns giving back
the undamaged store's μGraphs; damage it cannot mend refused with the store untouched; a kill at any
step completed by running it again."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from mugraph.storage.run.errors import StoreBusy, StoreDamaged
from mugraph.storage.run.ledger import LEDGER_NAME
from mugraph.storage.run.repair import Unrepairable, repair_steps, repair_store
from mugraph.storage.run.repair_plan import plan_repair
from mugraph.storage.run.repair_scan import scan_store
from mugraph.storage.run.run_records import FinalRecord, MeasurementRecord
from mugraph.storage.run.store import FoundRecord, RunStore
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G
from tests.helpers.run_store import FRAGMENTS, IDENTITY, confirmation, layout, new_store, run_to_end
from tests.helpers.store_edits import file_digests

COUNTERS = ("verified", "nodes")
CHILDREN = [(0,), (1,), (2,)]


def finds(fragment: int, path: tuple[int, ...]) -> list[str]:
    """The keys of the μGraphs the task at `path` finds: two under each of the first two children."""
    return [f"f{fragment}k{path[0]}{j}" for j in range(2)] if len(path) == 1 and path[0] < 2 else []


def complete(st: RunStore, row: int, fragment: int, path: tuple[int, ...]) -> list[int]:
    """Complete a task as the search would: its finds (one fingerprint match each), its children."""
    keys = finds(fragment, path)
    found = [FoundRecord(fragment, D(k), (*path, j), G(k), row) for j, k in enumerate(keys)]
    counters = {"verified": float(len(keys)), "nodes": 10.0}
    return st.complete_task(row, counters=counters, worker="w0", found=found, children=CHILDREN if not path else [])


def ranking(fragment: int, digests: list[str]) -> list[dict[str, Any]]:
    rows = [{"digest": d, "reference": False, "estimated_seconds": 1.0 + k} for k, d in enumerate(digests)]
    return [*rows, {"digest": D("reference"), "reference": True, "estimated_seconds": 9.0}]


def measurement(digest: str) -> MeasurementRecord:
    return {"digest": digest, "worker": "w0", "wall_seconds": 1.0, "ok": True, "median_seconds": 1e-5, "error": ""}


def build(path: Path) -> None:
    """Two fragments, each a root and three children, two of which find two μGraphs each; every
    μGraph confirmed and laid out, one measured, the fragments ranked, two invocations' timelines,
    a complete final record."""
    meta = {"command": ["optimize", "prog", "--store", "elsewhere.zarr", "--fresh"]}
    with RunStore.open(path, IDENTITY, meta=meta, counter_names=COUNTERS) as st:
        st.set_fragments(FRAGMENTS[:2])
        for f, root in enumerate(st.add_tasks([(0, (), -1), (1, (), -1)])):
            for row, child in zip(complete(st, root, f, ()), CHILDREN, strict=True):
                complete(st, row, f, child)
        best = {}
        for f in range(2):
            digests = sorted(st.found(f))
            for d in digests:
                st.put_confirmation(f, d, confirmation(d))
                st.put_layout(f, d, layout(d))
            st.put_measurement(f, digests[0], measurement(digests[0]))
            st.put_ranking(f, ranking(f, digests))
            best[FRAGMENTS[f]["name"]] = digests[0]
        for inv in range(2):
            st.put_timeline(inv, [{"seconds": 1.0 + inv, "states": 10 * inv}])
        everything = sorted(d for f in range(2) for d in st.found(f))
        st.put_final(final(best, everything))


def final(best: dict[str, str], mugraphs: list[str]) -> FinalRecord:
    return {
        "complete": True,
        "best": "stitched",
        "best_per_fragment": best,
        "program_graph": "{}",
        "end_to_end_max_rel_err": 0.0,
        "mugraphs": mugraphs,
        "gpu_profile": "H100",
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("repair") / "s.zarr"
    build(path)
    return path


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "s.zarr"))


def read_everything(path: Path) -> None:
    """Open the store as every command does and read each record; its writer's open too."""
    with RunStore.open_existing(path) as st:
        st.timeline()
        st.final()
        for i in range(len(st.fragments())):
            st.found(i), st.confirmations(i), st.layouts(i), st.measurements(i), st.ranking(i)
    RunStore.open(path, IDENTITY, counter_names=COUNTERS).close()


def tamper(file: Path) -> None:
    """A record changed without its checksum (a bit flip would do the same)."""
    meta = json.loads(file.read_text())
    meta["attributes"]["tampered"] = 1
    file.write_text(json.dumps(meta))


def damage(path: Path, record: str, how: str) -> None:
    file = path / record / "zarr.json"
    if how == "tampered":
        tamper(file)
    elif how == "truncated":
        file.write_bytes(file.read_bytes()[:40])
    else:
        shutil.rmtree(path / record)


def first_found(path: Path, fragment: int) -> str:
    return sorted(p.name for p in (path / "found" / str(fragment)).iterdir() if p.is_dir())[0]


def ledger_records(path: Path) -> list[str]:
    return [json.loads(line)["record"] for line in (path / LEDGER_NAME).read_text().splitlines()]


# ------------------------------------------------------------------ records derived from the others


def test_an_intact_store_is_left_as_it_is(store: Path) -> None:
    before = file_digests(store)
    report = repair_store(store)
    assert not report.plan.changes and not report.plan.damage
    assert report.lines() == [f"run store {store}: no damaged record; nothing to repair"]
    assert file_digests(store) == before


DERIVED = [  # (damaged record, every record dropped with it)
    ("final", ["final"]),
    ("rankings/1", ["final", "rankings/1"]),
    ("layouts/1/{d1}", ["final", "rankings/1", "layouts/1/{d1}"]),
    ("confirmations/0/{d0}", ["final", "rankings/0", "layouts/0/{d0}", "confirmations/0/{d0}"]),
    ("measurements/0/{d0}", ["measurements/0/{d0}"]),
]


@pytest.mark.parametrize("how", ["tampered", "truncated", "deleted"])
@pytest.mark.parametrize(("record", "dropped"), DERIVED, ids=[r.split("/")[0] for r, _ in DERIVED])
def test_a_damaged_derived_record_is_dropped_with_what_names_it(
    store: Path, record: str, dropped: list[str], how: str
) -> None:
    names = {"d0": first_found(store, 0), "d1": first_found(store, 1)}
    record, dropped = record.format(**names), [r.format(**names) for r in dropped]
    before = ledger_records(store)
    damage(store, record, how)
    with pytest.raises(StoreDamaged, match=re.escape(f"run `mugraph repair {store}` to keep")):
        read_everything(store)
    report = repair_store(store)
    assert [d.record for d in report.plan.damage] == [record]
    assert report.plan.drop == dropped and not report.plan.rerun and not report.plan.emptied
    read_everything(store)
    assert ledger_records(store) == [r for r in before if r not in dropped]
    assert not any((store / r).exists() for r in dropped)
    with RunStore.open_existing(store) as st:
        assert not st.pending()  # the resume confirms, lays out and ranks again: no search task
        assert [len(st.found(i)) for i in range(2)] == [4, 4]
    assert report.plan.keeps_result() == (record.startswith("measurements"))


@pytest.mark.parametrize("how", ["tampered", "truncated", "deleted"])
def test_a_damaged_timeline_record_is_emptied_keeping_its_number(store: Path, how: str) -> None:
    damage(store, "timeline/000000", how)
    report = repair_store(store)
    assert report.plan.emptied == ["timeline/000000"] and not report.plan.drop
    read_everything(store)
    with RunStore.open_existing(store) as st:
        timeline: list[list[Any]] = list(st.timeline())
        assert timeline == [[], [{"seconds": 2.0, "states": 10}]]  # the next invocation is still 2
        assert st.final() is not None
    assert "timeline/000000" in ledger_records(store)
    assert report.plan.keeps_result() and "the run's result is intact" in report.summary()


# ------------------------------------------------------------------ found μGraphs


def rerun_pending(path: Path) -> None:
    """Run the pending tasks again as the driver would (the same finds, the same children)."""
    with RunStore.open(path, IDENTITY, counter_names=COUNTERS) as st:
        for t in st.pending():
            complete(st, t.row, t.fragment, t.path)


def found_view(path: Path) -> dict[int, dict[str, tuple[tuple[int, ...], int]]]:
    with RunStore.open_existing(path) as st:
        return {i: {d: (r.path, r.task) for d, r in st.found(i).items()} for i in range(2)}


@pytest.mark.parametrize("how", ["tampered", "truncated", "deleted"])
def test_a_damaged_found_record_reruns_the_task_that_found_it(built: Path, store: Path, how: str) -> None:
    d = first_found(store, 1)
    with RunStore.open_existing(store) as st:
        finder = st.found(1)[d].task
    damage(store, f"found/1/{d}", how)
    report = repair_store(store)
    assert report.plan.rerun == [finder]  # the task whose matches outnumber its intact records
    assert report.plan.drop == ["final", "rankings/1", "layouts/1/" + d, "confirmations/1/" + d, "found/1/" + d]
    assert report.plan.counts == {1: 3}
    read_everything(store)
    with RunStore.open_existing(store) as st:
        assert [t.row for t in st.pending()] == [finder]
        assert d not in st.found(1)
    rerun_pending(store)
    assert found_view(store) == found_view(built)  # the same μGraphs at the same paths, by the same tasks
    with RunStore.open_existing(store) as st:
        assert st.task_summary()["tasks"] == 8  # its children were found again, not added twice


def test_a_lost_found_record_without_a_ledger_is_found_by_the_count(built: Path, store: Path) -> None:
    """The ledger gone too: the commit record's count says a record is missing, and the rule that
    names the finder needs nothing of the lost record."""
    d = first_found(store, 0)
    with RunStore.open_existing(store) as st:
        finder = st.found(0)[d].task
    shutil.rmtree(store / "found" / "0" / d)
    (store / LEDGER_NAME).unlink()
    report = repair_store(store)
    assert report.plan.ledger_rebuilt and report.plan.rerun == [finder]
    assert {x.record for x in report.plan.damage} == {LEDGER_NAME, "found/0"}
    read_everything(store)
    rerun_pending(store)
    assert found_view(store) == found_view(built)


def test_without_a_match_counter_every_done_task_of_the_fragment_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with new_store(path) as st:  # counters without `verified`
        run_to_end(st, limit=60)
        tasks = st.tasks()
    done = [t.row for t in tasks if t.done and t.fragment == 0]
    tamper(path / "found" / "0" / first_found(path, 0) / "zarr.json")
    assert repair_store(path).plan.rerun == done
    with RunStore.open_existing(path) as st:
        assert not any(t.done for t in st.tasks() if t.fragment == 0)


# ------------------------------------------------------------------ the ledger


@pytest.mark.parametrize("how", ["line", "deleted"])
def test_a_damaged_ledger_is_rebuilt_from_the_records(store: Path, how: str) -> None:
    before = ledger_records(store)
    ledger = store / LEDGER_NAME
    if how == "line":
        data = bytearray(ledger.read_bytes())
        data[len(data) // 2] ^= 0x01
        ledger.write_bytes(bytes(data))
    else:
        ledger.unlink()
    report = repair_store(store)
    assert report.plan.ledger_rebuilt and not report.plan.drop and not report.plan.rerun
    assert sorted(ledger_records(store)) == sorted(before)
    read_everything(store)
    assert report.plan.keeps_result()


# ------------------------------------------------------------------ refused, dry run, busy


@pytest.mark.parametrize("file", ["tasks/info/c/0/0", "tasks/zarr.json", "fragments/zarr.json", "zarr.json"])
def test_damage_to_what_the_records_are_checked_against_is_refused(store: Path, file: str) -> None:
    target = store / file
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x40
    target.write_bytes(bytes(data))
    tamper(store / "timeline" / "000001" / "zarr.json")  # repairable damage beside it changes nothing
    before = file_digests(store)
    with pytest.raises(Unrepairable) as info:
        repair_store(store)
    msg = str(info.value)
    assert "\n" not in msg and "--fresh" in msg and str(target) in msg
    assert "mugraph repair" not in msg  # the refusal does not send the user back to repair
    assert file_digests(store) == before


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(store: Path) -> None:
    tamper(store / "found" / "0" / first_found(store, 0) / "zarr.json")
    before = file_digests(store)
    (store / "mugraph.lock").write_text("12345\n")  # the last writer's pid
    report = repair_store(store, dry_run=True)
    assert file_digests(store) == before and (store / "mugraph.lock").read_text() == "12345\n"
    assert report.plan.rerun and report.summary().startswith(f"would repair {store}: dropped 1 found μGraph")
    assert report.summary().endswith("nothing changed (--dry-run)")
    assert not report.record()["changed"]


def test_a_store_a_live_run_holds_is_refused(store: Path) -> None:
    tamper(store / "timeline" / "000001" / "zarr.json")
    before = file_digests(store)
    holder = RunStore.open_existing(store, readonly=False)
    try:
        with pytest.raises(StoreBusy):
            repair_store(store)
    finally:
        holder.close()
    assert file_digests(store) == before


def test_the_report_names_each_damaged_record_and_the_command_to_finish(store: Path) -> None:
    tamper(store / "timeline" / "000001" / "zarr.json")
    tamper(store / "confirmations" / "1" / first_found(store, 1) / "zarr.json")
    lines = repair_store(store).lines()
    assert len(lines) == 3 and all(line.startswith(f"damaged: {store}/") for line in lines[:2])
    summary = lines[-1]
    assert summary.startswith(f"repaired {store}: dropped 1 confirmation, 1 layout, 1 ranking, the final record")
    assert "emptied 1 timeline record" in summary
    assert summary.endswith(f"run `mugraph optimize prog --store {store}` to finish")  # no --fresh


# ------------------------------------------------------------------ kill -9 during the repair


def test_a_repair_killed_at_any_step_is_completed_by_the_next(store: Path, tmp_path: Path) -> None:
    """Each prefix of the repair's writes leaves a store still damaged, which `repair` completes to
    the store an uninterrupted repair leaves."""
    tamper(store / "found" / "1" / first_found(store, 1) / "zarr.json")
    tamper(store / "timeline" / "000000" / "zarr.json")
    whole = Path(shutil.copytree(store, tmp_path / "whole.zarr"))
    repair_store(whole)
    steps = len(repair_steps(plan_repair(scan_store(store))))
    assert steps >= 5
    for k in range(steps):
        killed = Path(shutil.copytree(store, tmp_path / f"killed{k}.zarr"))
        for step in repair_steps(plan_repair(scan_store(killed)))[:k]:
            step()
        with pytest.raises(StoreDamaged):
            read_everything(killed)
        repair_store(killed)
        assert file_digests(killed) == file_digests(whole), k
