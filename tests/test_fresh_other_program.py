"""A run store holding another program's run is neither resumed nor, with `--fresh`, deleted: the
refusal says what it holds and to choose another --store, and leaves every file as it was. `--fresh`
on a store of the same program (other settings) still starts over, and removes the report that
described the run it deleted, even where the new run is interrupted before it writes its own."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from mugraph.run.execute import run_optimize
from mugraph.run.options import OptimizeOptions
from mugraph.storage.run.errors import OtherProgram
from mugraph.storage.run.paths import RunPaths
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import mugraph, optimize_args
from tests.helpers.narrow import NARROW
from tests.helpers.run_store import IDENTITY, new_store


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished rms_norm run (its narrowed space, seconds), its report beside it."""
    where = tmp_path_factory.mktemp("finished")
    store = where / "rms.zarr"
    proc = mugraph(*optimize_args("rms_norm", store, "--workers", "1"), cwd=where)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert RunPaths(store).report.is_file()
    return store


def _copy(finished: Path, tmp_path: Path) -> Path:
    """The finished store and its neighbours, copied where a test may change them."""
    for entry in finished.parent.iterdir():
        if entry.name.startswith(finished.stem):
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, tmp_path / entry.name)
    return tmp_path / finished.name


def _files(store: Path) -> dict[str, bytes]:
    """Every file of the store and its report, by path, with its bytes."""
    paths = [p for p in store.rglob("*") if p.is_file()] + [RunPaths(store).report]
    return {str(p.relative_to(store.parent)): p.read_bytes() for p in paths}


def _status(store: Path) -> dict[str, Any]:
    proc = mugraph("status", str(store), "--json", cwd=store.parent)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


@pytest.mark.parametrize("fresh", [False, True], ids=["resume", "fresh"])
def test_a_store_of_another_program_is_refused_saying_what_it_holds(
    finished: Path, tmp_path: Path, fresh: bool
) -> None:
    store = _copy(finished, tmp_path)
    before, held = _files(store), _status(store)
    found = sum(f["found"] for f in held["fragments"])
    args = ["optimize", "lora", "--store", str(store), "--workers", "1", "--dashboard-address", "none"]
    proc = mugraph(*args, *(["--fresh"] if fresh else []), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    mugraphs = f"{found} μGraph{'' if found == 1 else 's'}"
    assert f"a run of another program, 'rms_norm' (complete, {mugraphs} found), not of 'lora'" in line, line
    assert line.index("choose another --store") < line.index(f"delete {store} yourself"), line
    assert ("refusing to delete" in line) == fresh, line
    assert "start over with --fresh" not in line and "fresh=True" not in line, line
    assert _files(store) == before  # nothing stored is lost, nor the report beside it
    assert _status(store)["identity"]["program"] == "rms_norm"


def test_fresh_on_a_store_of_the_same_program_starts_over_without_the_old_report(
    finished: Path, tmp_path: Path
) -> None:
    """Other search settings of the same program: --fresh deletes the run as before, and its report
    with it, though the new run is interrupted before it writes its own."""
    store = _copy(finished, tmp_path)
    report = RunPaths(store).report
    assert report.is_file()
    settings = {**NARROW["rms_norm"], "franges": [16]}
    options = OptimizeOptions(settings=settings, workers=1, store=store, dashboard_address=None, fresh=True, budget=40)
    seen: list[str] = []

    def interrupt(e: Any) -> None:
        seen.append(e["event"])
        if e["event"] == "start":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_optimize("rms_norm", options, on_event=interrupt)
    assert seen == ["start"]
    assert not report.exists()
    after = _status(store)
    assert after["identity"]["program"] == "rms_norm" and not after["complete"]
    assert after["identity"]["config_digest"] != _status(finished)["identity"]["config_digest"]


def test_the_same_program_with_other_settings_is_still_told_to_start_over(finished: Path, tmp_path: Path) -> None:
    store = _copy(finished, tmp_path)
    before = _files(store)
    args = ["optimize", "rms_norm", "--store", str(store), "--workers", "1", "--dashboard-address", "none"]
    proc = mugraph(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "was made for another run" in proc.stderr and "start over with --fresh" in proc.stderr, proc.stderr
    assert "another program" not in proc.stderr
    assert _files(store) == before


@pytest.mark.parametrize("fresh", [False, True])
def test_a_store_of_another_program_is_neither_opened_nor_deleted(tmp_path: Path, fresh: bool) -> None:
    new_store(tmp_path / "s").close()
    files = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    with pytest.raises(OtherProgram) as err:
        RunStore.open(tmp_path / "s", {**IDENTITY, "program": "mlp"}, fresh=fresh)
    assert (err.value.stored, err.value.given, err.value.fresh) == ("lora", "mlp", fresh)
    assert "another program, 'lora'" in str(err.value) and "choose another --store" in str(err.value)
    assert {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()} == files
    assert pickle.loads(pickle.dumps(err.value)).args == err.value.args  # a Dask worker's error comes back whole
    RunStore.open(tmp_path / "s", IDENTITY, fresh=fresh).close()  # its own program's run opens, and --fresh empties it
