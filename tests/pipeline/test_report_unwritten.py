"""A report the disk refuses (full, read-only) after the run stored its whole result: the run still
ends with its result (exit 0, `done` with `report` null), and one warning names the command that
writes the report later; it failed the run (exit 2, no `done`) where the store held the result."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import mugraph.run.execute
from mugraph.run.options import OptimizeOptions
from mugraph.run.printed import run_printed
from tests.helpers.narrow import NARROW


def test_a_report_the_disk_refuses_leaves_the_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mugraph.run.execute, "write_report", full)
    store = tmp_path / "run.zarr"
    options = OptimizeOptions(settings=NARROW["rms_norm"], workers=1, memo_url="local", store=store, command=("x",))
    lines: list[str] = []
    with pytest.warns(RuntimeWarning, match=r"report was not written \(No space left on device\)") as said:
        done = run_printed("rms_norm", options, as_json=True, echo=lines.append)
    assert done["complete"] and done["report"] is None
    last = json.loads(lines[-1])
    assert last["event"] == "done" and last["report"] is None and last["best"] == done["best"]
    assert f"`mugraph report {store}` writes the report" in str(said[0].message)
    assert not (tmp_path / "run.report.html").exists()
