"""How to go on with a stopped run is one sentence, said alike by the run (its summary) and by every
command that reads its store afterwards (`status`, `show`, `emit`), each naming the command that made
the store; the interrupt line says the run's own form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest

from mugraph.cli import main
from mugraph.cli.app import _interrupted_line
from mugraph.dashboards.report_html import finish_advice
from mugraph.dashboards.report_records import ReportData
from mugraph.pipeline.interrupts import INTERRUPTED, INTERRUPTED_FRESH
from mugraph.run.options import model_command
from mugraph.run.resume import how_to_resume
from mugraph.storage.run.recorded_command import for_a_person, resuming_command
from tests.helpers.cli_runs import mugraph


def _said(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    main(argv)
    out = capsys.readouterr()
    return out.out + out.err


def test_every_place_says_the_same_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run started with `--json`: the advice names its command without it (a person reading "run this
    to resume" wants the verdict, not a stream of JSON), with every flag that changes the result."""
    args = ["optimize", "rms_norm", "--workers", "1", "--memo-url", "local", "--dashboard-address", "none"]
    store = tmp_path / "run.zarr"
    stopped = mugraph(*args, "--json", "--store", str(store), "--time-limit", "1", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    done = json.loads(stopped.stdout.splitlines()[-1])
    assert not done["complete"] and done["resume"] == how_to_resume()  # the run, of its own command

    sentence = f"run `mugraph {' '.join(args)} --time-limit 1 --store {store}` to resume"  # as typed, less --json
    said = {
        "status": _said(capsys, ["status", str(store)]),
        "show": _said(capsys, ["show", str(store)]),
        "emit": _said(capsys, ["emit", str(store), "--out", str(tmp_path / "k.py")]),
    }
    assert {name: sentence in text for name, text in said.items()} == dict.fromkeys(said, True), said
    assert not [name for name, text in said.items() if "--json" in text], said


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


def test_the_reports_advice_leaves_out_the_output_format(tmp_path: Path) -> None:
    """The report of a run killed before its end (provisional) says how to finish it, as `status` does."""
    meta = {"command": ["optimize", "lora", "--json", "--budget", "9"], "cwd": str(tmp_path)}
    said = finish_advice(cast(ReportData, {"store": str(tmp_path / "s.zarr"), "meta": meta}))
    assert said == f"Finish it with `mugraph optimize lora --budget 9 --store {tmp_path / 's.zarr'}`.", said


def test_only_the_output_flag_is_left_out() -> None:
    def said(command: str) -> str:
        return " ".join(for_a_person(command.split()))

    assert said("optimize lora --json --store s.zarr") == "optimize lora --store s.zarr"
    assert said("optimize lora --store --json") == "optimize lora --store --json"  # a value
    assert said("optimize x.py --emit --json -- --json") == "optimize x.py --emit -- --json"
    assert said("optimize lora --fresh --budget 9") == "optimize lora --fresh --budget 9"


def test_every_reader_of_the_recorded_command_gets_it_without_the_output_format(tmp_path: Path) -> None:
    """`repair`'s advice, the report's, `status`'s and a torch store's all come from `resuming_command`."""
    meta = {"command": ["optimize", "lora", "--json", "--fresh", "--budget", "9"], "cwd": str(tmp_path)}
    assert (
        resuming_command(meta, tmp_path / "s.zarr") == f"mugraph optimize lora --budget 9 --store {tmp_path / 's.zarr'}"
    )
