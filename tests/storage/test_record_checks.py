"""The run store's records checked against each other and against the commit record's count of found
μGraphs, without the ledger; stored values of the wrong type are damage, never an assertion."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from mugraph.storage.run.ledger import LEDGER_NAME
from mugraph.storage.run.records import read_record, run_tag, write_record
from mugraph.storage.run.store import RunStore, StoreDamaged
from tests.helpers.graphs import digest_of as D
from tests.helpers.run_store import FRAGMENTS, IDENTITY, complete, confirmation, layout, new_store, run_to_end
from tests.helpers.store_edits import record_store


@pytest.fixture(scope="module")
def judged_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished store whose fragment 0 has its μGraphs confirmed, laid out, ranked and a final record."""
    path = tmp_path_factory.mktemp("judged") / "s"
    with new_store(path) as st:
        run_to_end(st)
        digests = sorted(st.found(0))
        for d in digests:
            st.put_confirmation(0, d, confirmation(d))
            st.put_layout(0, d, layout(d))
        st.put_ranking(
            0, [{"digest": d, "reference": False} for d in digests] + [{"digest": D("reference"), "reference": True}]
        )
        for f in (1, 2):
            for d in st.found(f):
                st.put_confirmation(f, d, confirmation(d, equivalent=False))
        st.put_final({"complete": True, "best_per_fragment": {"f0": digests[0]}, "mugraphs": digests})
    return path


@pytest.fixture
def judged(judged_once: Path, tmp_path: Path) -> Path:
    store = Path(shutil.copytree(judged_once, tmp_path / "s"))
    (store / LEDGER_NAME).write_bytes(b"")  # every case below passes the ledger's own check
    return store


def first(store: Path, kind: str) -> str:
    return sorted(p.name for p in (store / kind / "0").iterdir() if p.is_dir())[0]


def refused(store: Path, *parts: str) -> str:
    """The one-line damage message both openers give; it holds every part."""
    messages = []
    for writer in (False, True):
        with pytest.raises(StoreDamaged) as info:
            new_store(store).close() if writer else RunStore.open_existing(store)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "\n" not in messages[0] and "--fresh" in messages[0]
    for part in parts:
        assert part in messages[0], messages[0]
    return messages[0]


def test_an_intact_store_with_an_emptied_ledger_opens(judged: Path) -> None:
    with RunStore.open_existing(judged) as st:
        assert st.final() and len(st.confirmations(0)) == len(st.found(0)) > 1
    with new_store(judged) as st:
        assert st.task_summary()["pending"] == 0


@pytest.mark.parametrize("kind", ["confirmations", "layouts"])
def test_a_record_naming_a_missing_found_one(judged: Path, kind: str) -> None:
    d = first(judged, "found")
    shutil.rmtree(judged / "found" / "0" / d)
    if kind == "layouts":
        shutil.rmtree(judged / "confirmations" / "0" / d)
    refused(judged, f"{judged}/found/0/{d}/zarr.json: missing, though {judged}/{kind}/0/{d}/zarr.json names it")


def test_the_commit_record_counts_the_found_records(judged: Path) -> None:
    """A found μGraph that nothing else names (fragment 1's are confirmed only) is missed by its count."""
    victim = sorted(p for p in (judged / "found" / "1").iterdir() if p.is_dir())[0]
    shutil.rmtree(victim)
    shutil.rmtree(judged / "confirmations" / "1" / victim.name)
    shutil.rmtree(judged / "final")
    refused(judged, f"{judged}/found/1: holds", f"the commit record {judged}/tasks/zarr.json counts")


def test_a_layout_without_its_confirmation(judged: Path) -> None:
    d = first(judged, "layouts")
    shutil.rmtree(judged / "confirmations" / "0" / d)
    refused(judged, f"{judged}/confirmations/0/{d}/zarr.json: missing, though {judged}/layouts/0/{d}")


def test_a_ranked_mugraph_without_its_layout(judged: Path) -> None:
    d = first(judged, "layouts")
    shutil.rmtree(judged / "layouts" / "0" / d)
    refused(judged, f"{judged}/layouts/0/{d}/zarr.json: missing, though {judged}/rankings/0/zarr.json names it")


def test_a_final_record_without_the_ranking_of_its_best(judged: Path) -> None:
    shutil.rmtree(judged / "rankings")
    refused(judged, f"{judged}/rankings/0/zarr.json: missing, though {judged}/final/zarr.json names the best")


def test_a_complete_run_confirmed_every_found_mugraph(judged: Path) -> None:
    d = sorted(p.name for p in (judged / "confirmations" / "2").iterdir() if p.is_dir())[0]
    shutil.rmtree(judged / "confirmations" / "2" / d)
    refused(
        judged,
        f"{judged}/confirmations/2/{d}/zarr.json: missing, though {judged}/final/zarr.json says the run is complete",
    )


def test_a_final_record_naming_an_unconfirmed_mugraph(judged: Path) -> None:
    d = first(judged, "confirmations")
    for kind in ("confirmations", "layouts"):
        shutil.rmtree(judged / kind / "0" / d)
    shutil.rmtree(judged / "rankings")
    refused(judged, f"{judged}/confirmations/0/{d}/zarr.json: missing, though {judged}/final/zarr.json names it")


def test_a_store_made_before_the_count_was_kept_opens(judged: Path) -> None:
    store = record_store(judged)
    attrs = store_attrs(judged, "tasks")
    del attrs["found"]
    write_record(store, "tasks", attrs)
    with RunStore.open_existing(judged) as st:
        assert st.task_summary()["pending"] == 0


def store_attrs(root: Path, path: str) -> dict[str, Any]:
    from zarr.core.sync import sync

    attrs = sync(read_record(record_store(root, read_only=True), root, path))
    assert attrs is not None
    return attrs


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("path", "0, 1"),
        ("path", [0.0, 1.5]),
        ("path", [0, True]),
        ("task", True),
        ("task", "3"),
        ("graph", None),
        ("graph", []),
    ],
)
def test_a_found_record_of_the_wrong_type_is_damage(judged: Path, field: str, value: Any) -> None:
    d = first(judged, "found")
    attrs = store_attrs(judged, f"found/0/{d}")
    attrs[field] = value
    write_record(record_store(judged), f"found/0/{d}", attrs)  # sealed: only its value is wrong
    file = judged / "found" / "0" / d / "zarr.json"
    with RunStore.open_existing(judged) as st, pytest.raises(StoreDamaged, match=f"{file}: "):
        st.found(0)


GONE = object()  # the field deleted


@pytest.mark.parametrize(
    ("kind", "field", "value", "says"),
    [
        ("confirmations", "equivalent", "yes", "confirmation: equivalent 'yes' is not of the recorded type"),
        ("confirmations", "equivalent", GONE, "confirmation lacks equivalent"),
        ("confirmations", "worker", GONE, "confirmation lacks worker"),
        ("layouts", "io_layouts", GONE, "layout lacks io_layouts"),
        ("layouts", "schema", 1, "layout: schema 1 is not of the recorded type"),
        ("layouts", "error", {"text": "x"}, "layout: error {'text': 'x'} is not of the recorded type"),
    ],
)
def test_a_judgement_of_the_wrong_shape_is_damage(judged: Path, kind: str, field: str, value: Any, says: str) -> None:
    d = first(judged, kind)
    attrs = store_attrs(judged, f"{kind}/0/{d}")
    if value is GONE:
        del attrs["result"][field]
    else:
        attrs["result"][field] = value
    write_record(record_store(judged), f"{kind}/0/{d}", attrs)  # sealed: only its shape is wrong
    file = judged / kind / "0" / d / "zarr.json"
    with RunStore.open_existing(judged) as st:
        with pytest.raises(StoreDamaged, match=re.escape(f"{file}: {says}")):
            st.confirmations(0) if kind == "confirmations" else st.layouts(0)
        assert len(st.found(0)) > 1 and st.final() is not None  # the other records still read


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("graph", GONE, "a fragment lacks graph"),
        ("name", 3, "a fragment: name 3 is not of the recorded type"),
        ("sources", "x", "fragment 'f0': sources is not a list of strings"),
    ],
)
def test_a_fragment_record_of_the_wrong_shape_is_damage(judged: Path, field: str, value: Any, says: str) -> None:
    attrs = store_attrs(judged, "fragments")
    if value is GONE:
        del attrs["fragments"][0][field]
    else:
        attrs["fragments"][0][field] = value
    write_record(record_store(judged), "fragments", attrs)
    refused(judged, f"{judged}/fragments/zarr.json: {says}")


def test_a_progress_sample_that_is_not_an_object_is_damage(tmp_path: Path) -> None:
    with new_store(tmp_path / "s") as st:
        st.put_timeline(0, [{"wall": 1.0, "states": 3}])
        st.put_timeline(1, [{"wall": 2.0, "states": 5}])
        samples = {"samples": [{"wall": 2.0}, [2.0, 5]], "run": run_tag(IDENTITY)}
        write_record(record_store(tmp_path / "s"), "timeline/000001", samples)
        with pytest.raises(StoreDamaged, match=re.escape(f"{tmp_path}/s/timeline/000001/zarr.json: samples is not")):
            st.timeline()


def test_a_found_record_gone_between_listing_and_reading(judged: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mugraph.storage.run import found_records

    async def gone(*args: Any) -> None:
        return None

    with RunStore.open_existing(judged) as st:
        monkeypatch.setattr(found_records, "read_record", gone)
        with pytest.raises(StoreDamaged, match="missing"):
            st.found(0)


# ------------------------------------------------------------------ readers beside a live writer


def _judging_writer(path: str) -> None:
    """In a forked child: search, confirm and lay out what is found, rank and write a final record now
    and then, in the driver's order."""
    with new_store(Path(path)) as st:
        st.set_fragments(FRAGMENTS)
        st.add_tasks([(f, (), -1) for f in range(len(FRAGMENTS))])
        n = 0
        while todo := st.pending():
            for t in todo:
                complete(st, t, f"w{os.getpid()}")
                n += 1
                for f in range(len(FRAGMENTS)):
                    for d in sorted(set(st.found(f)) - set(st.confirmations(f))):
                        st.put_confirmation(f, d, confirmation(d))
                        st.put_layout(f, d, layout(d))
                if n % 40 == 0:
                    best = {}
                    for f, frag in enumerate(FRAGMENTS):
                        ranked = sorted(st.layouts(f))
                        st.put_ranking(
                            f, [{"digest": d} for d in ranked] + [{"digest": D("reference"), "reference": True}]
                        )
                        best[frag["name"]] = ranked[0] if ranked else D("reference")
                    mugraphs = sorted(d for f in range(len(FRAGMENTS)) for d in st.confirmations(f))
                    st.put_final({"complete": False, "best_per_fragment": best, "mugraphs": mugraphs})
    os._exit(0)


def test_readers_beside_a_judging_writer_never_see_damage(tmp_path: Path) -> None:
    path = tmp_path / "run.zarr"
    new_store(path).close()
    child = multiprocessing.get_context("fork").Process(target=_judging_writer, args=(str(path),))
    child.start()
    reads = 0
    while child.is_alive() or not reads:
        with RunStore.open_existing(path) as st:
            for f in range(len(st.fragments())):
                assert set(st.confirmations(f)) <= set(st.found(f))
        reads += 1
    child.join()
    assert child.exitcode == 0 and reads >= 3
    assert json.loads((path / "final" / "zarr.json").read_text())["attributes"]["final"]["mugraphs"]
