"""What the command line says of a run that has not got far: `status` of a store interrupted before
its first task was recorded, and the line on an expert that a search stopped at its time limit has
not reached yet (not "NOT found")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mugraph.cli import main
from mugraph.pipeline.plan import make_plan
from mugraph.programs import get_builtin
from mugraph.run.expert import expert_line
from mugraph.storage.run.errors import MISMATCH_HINT, command_line_text
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


def _error_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mugraph: error: "), lines
    return lines[0]


def test_a_live_run_with_nothing_yet_is_said_to_be_going(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The store's writer holds it (this process, as a run's driver would): `status` does not tell the
    user to run optimize, `emit` does not say the run stopped, `repair` names no --store it lacks."""
    store = tmp_path / "run.zarr"
    live = new_store(store)
    try:
        main(["status", str(store)])
        out = capsys.readouterr().out
        assert f"running (pid {os.getpid()})" in out and "no task recorded yet: the run has recorded none" in out
        assert "run optimize again" not in out, out
        line = _error_line(capsys, ["emit", str(store)])
        assert f"the run is still going (pid {os.getpid()})" in line and "stopped" not in line, line
        line = _error_line(capsys, ["repair", str(store), "--dry-run"])
        assert f"pid {os.getpid()}" in line and "--store" not in line and "run repair again" in line, line
        main(["show", str(store)])  # a poller in the first seconds of a run: exit 0, not "run optimize"
        out = capsys.readouterr().out
        assert f"the run is still going (pid {os.getpid()}) and has confirmed no μGraph yet" in out, out
        main(["show", str(store), "--json"])
        shown = json.loads(capsys.readouterr().out)
        assert shown["running"] == os.getpid() and shown["final"] is None
        assert all(f["ranking"] == [] for f in shown["fragments"])
    finally:
        live.close()
    line = _error_line(capsys, ["show", str(store)])  # stopped with nothing confirmed: how to go on
    assert "its run stopped before it confirmed a μGraph; run" in line and "to resume" in line, line


def test_the_command_line_names_its_options_not_the_librarys_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command_line_text(MISMATCH_HINT) == (
        "choose another --store to keep what it holds, or start over with --fresh, which deletes it"
    )
    store = tmp_path / "run.zarr"
    new_store(store).close()  # made for another run
    line = _error_line(capsys, ["optimize", "rms_norm", "--store", str(store), "--workers", "1"])
    assert "--fresh" in line and "fresh=True" not in line and "store=" not in line, line


DEAD = """
from mugraph.ir.graph import KernelGraph


def reference() -> KernelGraph:
    g = KernelGraph()
    x = g.new_input((16, 64), name="X")
    g.exp(x)  # read by no output
    g.mark_output(x, "O")
    return g
"""


def test_check_and_optimize_agree_on_a_program_with_nothing_to_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output that is an input, beside a dead op: check does not promise a search optimize refuses,
    and both give the same reason (not "every op is glue (none)")."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dead.py").write_text(DEAD)
    main(["check", "dead.py"])
    said = capsys.readouterr().out
    why = "no op of the program reaches an output: each output is one of its inputs"
    assert f"nothing for optimize to search: {why}" in said and "searches for μGraphs" not in said, said
    line = _error_line(capsys, ["optimize", "dead.py", "--workers", "1"])
    assert f"dead: nothing to search: {why}" in line and "glue" not in line, line
