"""An interrupt (SIGTERM from a CI timeout, a Ctrl-C) that comes after the run stored its whole result,
while it closes its cluster or writes its report: the command gives the stored result (its `done` line,
exit 0) and says it was interrupted after the end, where it said "interrupted; run the same command to
resume" of a complete store. One that comes before the end is an interrupt as before."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import mugraph.run.execute
from mugraph.pipeline import interrupts
from mugraph.run.options import OptimizeOptions
from mugraph.run.printed import run_printed
from tests.helpers.cli_runs import optimize_args, start
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
    # a host calling run_printed still takes its interrupts after it (the handler's marks undone after)
    monkeypatch.setattr(interrupts, "_LAST_SIGNAL", [None])
    monkeypatch.setattr(interrupts, "quiet_event_loop_logs", lambda: None)
    with pytest.raises(KeyboardInterrupt):
        interrupts._interrupted(signal.SIGINT, None)


def test_an_interrupt_before_the_end_is_an_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any) -> Any:  # the signal while the search runs: nothing final stored
        raise KeyboardInterrupt

    monkeypatch.setattr(mugraph.run.execute, "_drive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_printed("rms_norm", _options(tmp_path / "run.zarr"), as_json=True, echo=lambda line: None)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_signal_as_the_done_line_comes_out_exits_0(tmp_path: Path, sig: signal.Signals) -> None:
    """The signal sent as the reader sees `done` (a script's Ctrl-C, a CI timeout) lands while the line
    is written, while the command returns, or while the interpreter exits: the result stands in every
    case, exit 0 after one line (none once the interpreter's last steps ignore it), where it was 130
    with "run the same command to resume", or the signal's own death (130 or 143) with no line."""
    proc = start(optimize_args("rms_norm", tmp_path / "run.zarr", "--workers", "1"), tmp_path)
    assert proc.stdout is not None
    last = ""
    for last in proc.stdout:
        if '"event": "done"' in last:
            os.killpg(proc.pid, sig)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(last)["event"] == "done" and out == ""
    said = [line for line in err.splitlines() if "interrupted" in line]  # none where it came in the last instant
    assert len(said) <= 1 and all("interrupted after the" in s and "to resume" not in s for s in said), err[-2000:]
