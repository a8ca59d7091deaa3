"""A committed record that is missing from a real run store is damage, reported by every command with the
file and the way out (`--fresh`), never a run that finishes "complete" with fewer μGraphs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mugraph.cli import main
from mugraph.storage.run.ledger import LEDGER_NAME
from tests.helpers.cli_runs import done, mugraph, optimize_args

BUDGET = 40


@pytest.fixture(scope="module")
def finished_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("finished")
    last = done(mugraph(*optimize_args("lora", cwd / "run.zarr", "--workers", "2", budget=BUDGET), cwd=cwd))
    assert last["complete"] and len(last["mugraphs"]) >= 2
    return cwd / "run.zarr"


def unfinish(store: Path) -> None:
    """The store as a driver killed just before its final record leaves it (every task done, no result)."""
    shutil.rmtree(store / "final")
    ledger = store / LEDGER_NAME
    lines = [line for line in ledger.read_text().splitlines(keepends=True) if json.loads(line)["record"] != "final"]
    ledger.write_text("".join(lines))


def first_digest(store: Path, kind: str) -> str:
    return sorted(p.name for p in (store / kind / "0").iterdir() if p.is_dir())[0]


REMOVALS = [
    "found/0/{d}/zarr.json",
    "found/0/{d}",
    "found",
    "fragments/zarr.json",
    "confirmations/0/{d}/zarr.json",
    "layouts/0/{d}",
]


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "unfinished"])
@pytest.mark.parametrize("remove", REMOVALS)
def test_every_command_reports_the_missing_record(
    finished: bool,
    remove: str,
    finished_once: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = Path(shutil.copytree(finished_once, tmp_path / "run.zarr"))
    if not finished:
        unfinish(store)
    target = store / remove.format(d=first_digest(store, "found"))
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    monkeypatch.chdir(tmp_path)
    commands = [
        optimize_args("lora", store, "--workers", "1", budget=BUDGET),
        ["status", str(store)],
        ["show", str(store)],
        ["report", str(store)],
    ]
    for argv in commands:
        with pytest.raises(SystemExit) as info:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert info.value.code == 2 and len(err.splitlines()) == 1, (argv[0], err)
        assert "run store damaged" in err and "--fresh" in err and "missing" in err, err
        if target.name == "zarr.json":
            assert str(target) in err, err
    assert not target.exists()  # nothing was rewritten behind the user's back
