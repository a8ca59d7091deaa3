"""`mugraph repair` end to end on a real run of rms_norm: a store with a damaged timeline record,
confirmation, found μGraph or ledger, or a final program `emit` refuses (edited and resealed), is
repaired, and the same `mugraph optimize` then finishes with the undamaged run's μGraphs and best;
damage to the task table is refused with the store untouched, and `--dry-run` changes nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mugraph.cli import main
from mugraph.storage.run.ledger import LEDGER_NAME
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import done, mugraph
from tests.helpers.store_edits import edit_final_program, file_digests, first_kind

Found = dict[str, tuple[tuple[int, ...], int]]


def optimize_args(store: Path) -> list[str]:
    return ["optimize", "rms_norm", "--store", str(store), "--workers", "1", "--json", "--dashboard-address", "none"]


def found_view(store: Path) -> Found:
    """Each found μGraph's path and the task that found it."""
    with RunStore.open_existing(store) as st:
        return {d: (r.path, r.task) for d, r in st.found(0).items()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Found]:
    cwd = tmp_path_factory.mktemp("finished")
    store = cwd / "run.zarr"
    last = done(mugraph(*optimize_args(store), cwd=cwd))
    assert last["complete"] and len(last["mugraphs"]) >= 10
    return store, last, found_view(store)


@pytest.fixture
def store(finished: tuple[Path, dict[str, Any], Found], tmp_path: Path) -> Path:
    return Path(shutil.copytree(finished[0], tmp_path / "run.zarr"))


def records(store: Path, kind: str) -> list[Path]:
    return sorted(p / "zarr.json" for p in (store / kind / "0").iterdir() if (p / "zarr.json").is_file())


def tamper(file: Path) -> None:
    """A record changed without its checksum (what a bit flip does)."""
    meta = json.loads(file.read_text())
    meta["attributes"]["tampered"] = 1
    file.write_text(json.dumps(meta))


def flip(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x01
    file.write_bytes(bytes(data))


def damage_found(store: Path) -> None:
    """A μGraph found by a task below the root (the root's own finds would rerun the root alone too)."""
    with RunStore.open_existing(store) as st:
        digest = next(d for d, r in sorted(st.found(0).items()) if r.task > 0)
    tamper(store / "found" / "0" / digest / "zarr.json")


def truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:1])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "timeline": lambda s: truncate(s / "timeline" / "000000" / "zarr.json"),
    "confirmation": lambda s: tamper(records(s, "confirmations")[3]),
    "found": damage_found,
    "ledger": lambda s: flip(s / LEDGER_NAME),
}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`mugraph ARGV` in this process: exit status, stdout, stderr."""
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_repaired_store_resumes_to_the_undamaged_result(
    kind: str,
    finished: tuple[Path, dict[str, Any], Found],
    store: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, undamaged, undamaged_found = finished
    DAMAGE[kind](store)
    monkeypatch.chdir(store.parent)
    code, _, err = run_cli(["status", str(store)], capsys)
    assert code == 2 and "run store damaged" in err and f"run `mugraph repair {store}` to keep" in err, err
    code, out, _ = run_cli(["repair", str(store)], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2 and lines[0].startswith(f"damaged: {store}/"), out
    assert lines[1].startswith(f"repaired {store}: "), out
    intact = kind in ("timeline", "ledger")  # no record the result rests on was lost
    assert lines[1].endswith("the run's result is intact" if intact else f"--store {store}` to finish"), out
    last = done(mugraph(*optimize_args(store), cwd=store.parent))
    assert last["complete"] and last["tasks_pending"] == 0
    assert sorted(last["mugraphs"]) == sorted(undamaged["mugraphs"])
    assert last["best"] == undamaged["best"]
    assert last["best_per_fragment"] == undamaged["best_per_fragment"]
    assert found_view(store) == undamaged_found  # the same μGraphs, paths and finders
    if kind == "found":
        assert last["tasks_run"] == 1 and last["confirms_run"] == 1  # the finder alone ran again


def test_task_table_damage_is_refused_and_the_store_left_as_it_is(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chunk = store / "tasks" / "info" / "c" / "0" / "0"
    flip(chunk)
    DAMAGE["timeline"](store)  # repairable damage beside it is left too
    before = file_digests(store)
    monkeypatch.chdir(store.parent)
    code, out, err = run_cli(["repair", str(store)], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert str(chunk) in err and "--fresh" in err and "cannot mend" in err, err
    assert file_digests(store) == before


def test_a_dry_run_changes_nothing(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    damage_found(store)
    before = file_digests(store)
    monkeypatch.chdir(store.parent)
    code, out, _ = run_cli(["repair", str(store), "--dry-run", "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["dry_run"] and not report["changed"]
    assert len(report["damaged"]) == 1 and len(report["tasks_rerun"]) == 1 and report["dropped"]
    code, out, _ = run_cli(["repair", str(store), "--dry-run"], capsys)
    assert code == 0 and out.splitlines()[-1].endswith("nothing changed (--dry-run)"), out
    assert file_digests(store) == before
    code, _, err = run_cli(["status", str(store)], capsys)
    assert code == 2 and "run store damaged" in err  # still damaged: nothing was repaired


def test_an_edited_final_program_emit_refuses_is_what_repair_drops(
    finished: tuple[Path, dict[str, Any], Found],
    store: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The final record's program edited, its checksum recomputed: `emit` refuses it and sends the user
    to `repair`, which finds and drops it, and the resumed run stitches the undamaged program again."""
    edit_final_program(store, first_kind("rms_norm", "exp"))
    monkeypatch.chdir(store.parent)
    code, _, err = run_cli(["emit", str(store), "--out", "k.py"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"run `mugraph repair {store}`" in err, err
    code, out, _ = run_cli(["repair", str(store)], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2, out
    assert lines[0].startswith(f"damaged: {store}/final/zarr.json: the μGraph it holds does not compute"), out
    assert "dropped the final record" in lines[1] and lines[1].endswith(f"--store {store}` to finish"), out
    last = done(mugraph(*optimize_args(store), cwd=store.parent))
    assert last["complete"] and last["tasks_run"] == 0 and last["best"] == finished[1]["best"]
    code, _, err = run_cli(["emit", str(store), "--out", "k.py"], capsys)
    assert code == 0 and (store.parent / "k.py").is_file(), err
