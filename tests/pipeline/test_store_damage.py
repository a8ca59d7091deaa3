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


# ------------------------------------------------------------------ records that are whole but wrong


def commands(store: Path) -> list[list[str]]:
    return [
        optimize_args("lora", store, "--workers", "1", budget=BUDGET),
        ["status", str(store)],
        ["show", str(store)],
        ["report", str(store)],
    ]


def refused_by_all(
    argvs: list[list[str]],
    capsys: pytest.CaptureFixture[str],
    *files: Path,
    says: str | tuple[str, ...] = "run store damaged",
) -> None:
    """Each command exits 2 with one line that says `says` (or one of them), names one of `files` and
    the way out."""
    for argv in argvs:
        with pytest.raises(SystemExit) as info:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert info.value.code == 2 and len(err.splitlines()) == 1, (argv[0], err)
        said = any(words in err for words in ((says,) if isinstance(says, str) else says))
        assert said and "--fresh" in err and any(str(f) in err for f in files), (argv[0], err)


@pytest.mark.parametrize("kind", ["found", "confirmations", "layouts"])
def test_two_records_swapped_are_damage(
    kind: str, finished_once: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each record is named by its μGraph's digest: two records' contents swapped (each digest would
    label the other's graph, and another best be chosen) are damage, in every command."""
    store = Path(shutil.copytree(finished_once, tmp_path / "run.zarr"))
    a, b = sorted(p / "zarr.json" for p in (store / kind / "0").iterdir() if p.is_dir())[:2]
    text_a, text_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(text_b)
    b.write_bytes(text_a)
    monkeypatch.chdir(tmp_path)
    refused_by_all(commands(store), capsys, a, b)
    assert a.read_bytes() == text_b and b.read_bytes() == text_a  # nothing rewritten


@pytest.fixture(scope="module")
def other_run_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished lora store of another configuration (a narrower imaps limit)."""
    cwd = tmp_path_factory.mktemp("other")
    argv = optimize_args("lora", cwd / "run.zarr", "--workers", "2", "--set", "imaps=[[1,-1,-1]]", budget=BUDGET)
    assert done(mugraph(*argv, cwd=cwd))["complete"]
    return cwd / "run.zarr"


@pytest.mark.parametrize("part", ["tasks", "rankings", "zarr.json"])
def test_a_part_of_another_runs_store_is_damage(
    part: str,
    finished_once: Path,
    other_run_once: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The task table, a ranking, or the root zarr.json (the run's identity) copied from a store of
    another configuration: the run does not "resume" another run's tasks, and status and show do
    not report the mix as one run (a foreign table once read as complete at another space size)."""
    store = Path(shutil.copytree(finished_once, tmp_path / "run.zarr"))
    target = store / part
    if target.is_dir():
        shutil.rmtree(target)
        shutil.copytree(other_run_once / part, target)
    else:
        shutil.copyfile(other_run_once / part, target)
    monkeypatch.chdir(tmp_path)
    named = [store / "tasks" / "zarr.json", store / "rankings" / "0" / "zarr.json", store / "fragments" / "zarr.json"]
    # a record of another store fails its checksum, which covers the store's id, before its run tag is read
    foreign = ("written for another run", "copied from another store")
    if part == "zarr.json":  # optimize compares the root with the run it is asked for
        refused_by_all(commands(store)[:1], capsys, store, says="was made for another run")
        refused_by_all(commands(store)[1:], capsys, *named, says=foreign)
    else:
        refused_by_all(commands(store), capsys, *named, says=foreign)
