"""An interrupt (SIGTERM from a CI timeout, a Ctrl-C) that comes after the run stored its whole result,
while it closes its cluster or writes its report: the command gives the stored result (its `done` line,
exit 0) and says it was interrupted after the end, where it said "interrupted; run the same command to
resume" of a complete store. One that comes before the end is an interrupt as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mugraph.run.execute
from mugraph.run.options import OptimizeOptions
from mugraph.run.printed import run_printed
from tests.helpers.narrow import NARROW


def _options(store: Path) -> OptimizeOptions:
    return OptimizeOptions(settings=NARROW["rms_norm"], workers=1, memo_url="local", store=store, command=("x",))


def test_an_interrupt_after_the_result_was_stored_gives_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: Any) -> Any:  # the signal, as the report is being written
        raise KeyboardInterrupt

    monkeypatch.setattr(mugraph.run.execute, "_written_beside", interrupted)
    lines: list[str] = []
    done = run_printed("rms_norm", _options(tmp_path / "run.zarr"), as_json=True, echo=lines.append)
    assert done["complete"] and done["resume"] is None
    assert json.loads(lines[-1])["event"] == "done" and json.loads(lines[-1])["best"] == done["best"]
    assert "interrupted after the run finished; its result is complete in" in capsys.readouterr().err


def test_an_interrupt_before_the_end_is_an_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any) -> Any:  # the signal while the search runs: nothing final stored
        raise KeyboardInterrupt

    monkeypatch.setattr(mugraph.run.execute, "_drive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_printed("rms_norm", _options(tmp_path / "run.zarr"), as_json=True, echo=lambda line: None)
