"""How to go on with a stopped run is one sentence, said alike by the run (its summary) and by every
command that reads its store afterwards (`status`, `show`, `emit`), each naming the command that made
the store; the interrupt line says the run's own form."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.cli import main
from mugraph.cli.app import _interrupted_line
from mugraph.pipeline.interrupts import INTERRUPTED, INTERRUPTED_FRESH
from mugraph.run.options import model_command
from mugraph.run.resume import how_to_resume
from tests.helpers.cli_runs import mugraph


def _said(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    main(argv)
    out = capsys.readouterr()
    return out.out + out.err


def test_every_place_says_the_same_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["optimize", "rms_norm", "--workers", "1", "--memo-url", "local", "--dashboard-address", ":0"]
    store = tmp_path / "run.zarr"
    stopped = mugraph(*args, "--store", str(store), "--time-limit", "1", cwd=tmp_path)
    assert stopped.returncode == 0 and "stopped at the time limit" in stopped.stdout, stopped.stderr[-3000:]
    assert f"({how_to_resume()})" in stopped.stdout.splitlines()[0]  # the run, of its own command

    sentence = f"run `mugraph {' '.join(args)} --time-limit 1 --store {store}` to resume"  # as it was typed
    said = {
        "status": _said(capsys, ["status", str(store)]),
        "show": _said(capsys, ["show", str(store)]),
        "emit": _said(capsys, ["emit", str(store), "--out", str(tmp_path / "k.py")]),
    }
    assert {name: sentence in text for name, text in said.items()} == dict.fromkeys(said, True), said


def test_the_interrupt_line_is_the_runs_own_sentence() -> None:
    assert _interrupted_line(["optimize", "lora"]) == f"interrupted; {how_to_resume()}" == INTERRUPTED
    assert _interrupted_line(["optimize", "lora", "--fresh"]) == f"interrupted; {how_to_resume(fresh=True)}"
    assert _interrupted_line(["optimize", "lora", "--fresh"]) == INTERRUPTED_FRESH  # the import-time handler's
    assert _interrupted_line(["check", "lora"]) == "interrupted"  # nothing to resume


def test_a_model_called_with_keywords_is_resumed_with_them(tmp_path: Path) -> None:
    """A store `mugraph.optimize` made of a model called with keyword inputs is resumed by a call that
    passes them again: without them the model would be captured as another program."""
    with_kw, without = (
        how_to_resume(tmp_path, {"command": list(model_command("Layer", keywords))}) for keywords in (True, False)
    )
    assert "example_kwargs=example_kwargs, " in with_kw and with_kw.startswith("call mugraph.optimize(model, ")
    assert "example_kwargs" not in without and without.startswith("call mugraph.optimize(model, ")
    assert str(tmp_path) in with_kw and str(tmp_path) in without
