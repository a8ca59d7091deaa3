"""What the command line says of a run that has not got far: `status` of a store interrupted before
its first task was recorded, and the line on an expert that a search stopped at its time limit has
not reached yet (not "NOT found")."""

from __future__ import annotations

from pathlib import Path

import pytest

from mugraph.cli import main
from mugraph.pipeline.plan import make_plan
from mugraph.programs import get_builtin
from mugraph.run.expert import expert_line
from tests.helpers.run_store import new_store


def test_status_of_a_store_with_no_task_says_not_started(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "run.zarr"
    new_store(store).close()
    main(["status", str(store)])  # exits only on errors
    out = capsys.readouterr().out
    assert "size: not started" in out and "the whole space" not in out, out


def test_an_expert_inside_the_space_of_a_stopped_search_is_not_found_yet() -> None:
    prog = get_builtin("rms_norm")
    plan = make_plan(prog, None, {}, 10_000)
    fragments = [(fp.payload.reference, fp.config) for fp in plan.fragments]
    stopped = expert_line(prog, fragments, set(), complete=False)
    finished = expert_line(prog, fragments, set(), complete=True)
    assert stopped is not None and stopped.startswith("expert 'expert' not found yet: the search stopped at its")
    assert "inside the space" in stopped
    assert finished is not None and finished.startswith("expert 'expert' NOT found: inside the space")
