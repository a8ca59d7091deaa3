"""`emit` of a store whose records were edited and resealed, or damaged: refused, naming the record,
where `show` and `status` would read the same store (the checksums guard against damage only)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.cli_runs import done, mugraph, optimize_args
from tests.helpers.store_edits import edit_final_program, first_kind


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("edits")
    assert done(mugraph(*optimize_args("rms_norm", cwd / "run.zarr", "--workers", "1"), cwd=cwd))["complete"]
    return cwd / "run.zarr"


def _copy(store: Path, folder: Path) -> Path:
    return Path(shutil.copytree(store, folder / "run.zarr"))


def test_an_edited_final_program_is_refused_and_an_intact_one_emitted(finished: Path, tmp_path: Path) -> None:
    ok = mugraph("emit", str(finished), "--out", str(tmp_path / "ok.py"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    store = _copy(finished, tmp_path)
    edit_final_program(store, first_kind("rms_norm", "exp"))
    proc = mugraph("emit", str(store), "--out", str(tmp_path / "k.py"), cwd=tmp_path)
    assert proc.returncode == 2 and not (tmp_path / "k.py").exists()
    assert "run store damaged" in proc.stderr and "final" in proc.stderr and "does not compute" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_damaged_found_record_stops_emit_as_it_stops_show(finished: Path, tmp_path: Path) -> None:
    store = _copy(finished, tmp_path)
    record = sorted((store / "found" / "0").glob("*/zarr.json"))[-1]
    record.write_bytes(record.read_bytes()[:100])
    for args in (["show", str(store)], ["emit", str(store), "--out", str(tmp_path / "k.py")]):
        proc = mugraph(*args, cwd=tmp_path)
        assert proc.returncode == 2 and "run store damaged" in proc.stderr and record.parent.name in proc.stderr
