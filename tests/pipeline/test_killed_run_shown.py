"""A run killed before its end (`kill -9`: no ranking, no final record) still answers `show` and
`status` with what it holds: its confirmed, laid-out μGraphs ranked as the run's end would rank them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from mugraph.dashboards.report import read_report_data
from tests.helpers.cli_runs import mugraph, start


def killed_after_layouts(store: Path, cwd: Path, wanted: int) -> set[str]:
    """Run lora's whole default space (minutes) until `wanted` μGraphs are laid out, then SIGKILL the
    driver, its workers and its memo server; the digests the run reported laid out."""
    args = ["optimize", "lora", "--store", str(store), "--json", "--dashboard-address", "none", "--workers", "2"]
    proc = start(args, cwd, stderr=subprocess.DEVNULL)
    laid: set[str] = set()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "layout" and event.get("error") is None:
                laid.add(event["digest"])
            if len(laid) >= wanted or event.get("event") == "done":
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return laid


@pytest.mark.slow  # a run killed and ranked: about 23 s
def test_show_and_status_rank_a_killed_run(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    laid = killed_after_layouts(store, tmp_path, wanted=3)
    assert len(laid) >= 3

    shown = mugraph("show", str(store), "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["final"] is None and out["provisional"] is True
    (frag,) = out["fragments"]
    digests = [r["digest"] for r in frag["ranking"] if not r["reference"]]
    assert laid <= set(digests)  # every μGraph laid out before the kill is ranked
    assert sum(r["reference"] for r in frag["ranking"]) == 1
    assert frag["best"] == frag["ranking"][0]
    times = [r["estimated_seconds"] for r in frag["ranking"] if r["confident"]]
    assert times == sorted(times)

    text = mugraph("show", str(store), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "the run stopped before its end" in text.stdout
    again = f"mugraph optimize lora --dashboard-address none --workers 2 --store {store}"
    assert f"run `{again}` to resume" in (text.stdout)
    assert frag["ranking"][0]["digest"][:16] in text.stdout or frag["ranking"][0]["reference"]

    status = mugraph("status", str(store), "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    (per,) = json.loads(status.stdout)["fragments"]
    assert per["provisional"] is True and per["best"] == frag["best"]["digest"]
    said = mugraph("status", str(store), cwd=tmp_path).stdout.splitlines()[0]
    assert said.endswith(f"(run `{again}` to resume)")

    # the report answers with the same ranking, and says it is provisional
    report = mugraph("report", str(store), "--out", str(tmp_path / "r.html"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "r.html").read_text()
    data = read_report_data(page)
    assert data["provisional"] == ["f0"] and data["final"] is None
    assert [r["digest"] for r in data["ranking"]["f0"]] == [r["digest"] for r in frag["ranking"]]
    assert data["chosen"]["f0"]["digest"] == frag["best"]["digest"]
    assert "no ranking yet" not in page and "Provisional: the run has not ended" in page
    assert f"Finish it with `mugraph optimize lora --dashboard-address none --workers 2 --store {store}`" in page


@pytest.mark.slow  # a lora run watched while it goes: about 28 s
def test_a_run_going_on_is_said_to_be_going(tmp_path: Path) -> None:
    """While a writer holds the store (here this process, through the store's real lock), `status`
    and `show` say the run is going, with its pid; once it lets go, that it stopped."""
    from mugraph.storage.run.backends import open_existing
    from mugraph.storage.run.protocol import RunStoreWriter

    store = tmp_path / "run.zarr"
    killed_after_layouts(store, tmp_path, wanted=1)
    stopped = json.loads(mugraph("status", str(store), "--json", cwd=tmp_path).stdout)
    assert stopped["running"] is None and not stopped["complete"]
    ranked = json.loads(mugraph("show", str(store), "--json", cwd=tmp_path).stdout)["fragments"][0]["ranking"]
    with open_existing(store, readonly=False) as writer:
        # a resumed run holds its last invocation's ranking, of fewer μGraphs than it has confirmed since
        assert isinstance(writer, RunStoreWriter)
        writer.put_ranking(0, [r for r in ranked if r["reference"]])
        status = mugraph("status", str(store), cwd=tmp_path)
        shown = mugraph("show", str(store), cwd=tmp_path)
        shown_json = json.loads(mugraph("show", str(store), "--json", cwd=tmp_path).stdout)
    assert [r["digest"] for r in shown_json["fragments"][0]["ranking"]] == [r["digest"] for r in ranked]
    after = json.loads(mugraph("show", str(store), "--json", cwd=tmp_path).stdout)
    assert after["provisional"] is False and len(after["fragments"][0]["ranking"]) == 1  # stopped: the stored one
    assert status.returncode == 0 and shown.returncode == 0, status.stderr + shown.stderr
    assert f"running (pid {os.getpid()})" in status.stdout.splitlines()[0]
    assert "the run is still going" in status.stdout and "stopped before its end" not in status.stdout
    assert f"the run is still going (pid {os.getpid()})" in shown.stdout and "interrupted or killed" not in shown.stdout
    assert shown_json["running"] == os.getpid() and shown_json["provisional"] is True


def test_a_stopped_run_is_continued_by_its_command_without_fresh(tmp_path: Path) -> None:
    """`show` names the command that made the store, at the store's path and without `--fresh` (which
    would delete it); a store made from Python, the call that made it; a store that records neither,
    the command in words."""
    from mugraph.run.resume import how_to_resume

    store = tmp_path / "s.zarr"
    made = {"command": ["optimize", "gqa", "--fresh", "--store", "old.zarr", "--time-limit", "60"]}
    assert how_to_resume(store, made) == f"run `mugraph optimize gqa --time-limit 60 --store {store}` to resume"
    python = how_to_resume(store, {"command": ["optimize", "<torch model M>"]})
    assert python == f"call mugraph.optimize(model, example_inputs, store={str(store)!r}) again to resume"
    assert "without --fresh" in how_to_resume(store, {})


def test_a_store_made_from_python_names_no_command_line() -> None:
    """`mugraph.optimize` records `optimize <torch model NAME>`, which no shell runs: neither `show`,
    `repair` nor `mugraph.load` offers it as a command."""
    from mugraph.storage.run.recorded_command import resuming_command

    assert resuming_command({"command": ["optimize", "<torch model GeluMLP>"]}, Path("s.zarr")) is None
    assert resuming_command({"command": ["optimize", "m.py", "--fresh"]}, Path("s.zarr")) == (
        "mugraph optimize m.py --store s.zarr"
    )
    elsewhere = {"command": ["optimize", "m.py"], "cwd": "/elsewhere"}  # started in another directory
    assert resuming_command(elsewhere, Path("s.zarr")) == "mugraph optimize /elsewhere/m.py --store s.zarr"
    here = {"command": ["optimize", "m.py", "--set", "x=1.py"], "cwd": str(Path.cwd())}
    assert resuming_command(here, Path("s.zarr")) == "mugraph optimize m.py --set x=1.py --store s.zarr"


def test_repair_names_the_python_call_for_a_store_made_from_python() -> None:
    """`repair`'s way to finish a run `mugraph.optimize` made is that call again, not a shell command
    for a program named after the model."""
    from types import SimpleNamespace
    from typing import cast

    from mugraph.storage.run.repair import resume_command
    from mugraph.storage.run.repair_plan import RepairPlan

    def plan(command: list[str]) -> RepairPlan:
        attrs = {"meta": {"command": command}, "identity": {"program": "GeluMLP"}}
        return cast(RepairPlan, SimpleNamespace(scan=SimpleNamespace(attrs=attrs)))

    made = resume_command(Path("s.zarr"), plan(["optimize", "<torch model GeluMLP>"]))
    assert made == "mugraph.optimize(model, example_inputs, store='s.zarr')"
    assert resume_command(Path("s.zarr"), plan([])) == "mugraph optimize GeluMLP --store s.zarr"


def test_a_stopped_run_taken_up_again_is_not_told_to_resume(tmp_path: Path) -> None:
    """A store whose last run stopped at its time limit (a result, not complete) that a run holds
    again (here this process, through the store's real lock): `show` says a run is going on with it,
    not to run the command that would resume it (which the held store would refuse)."""
    from mugraph.storage.run.backends import open_existing

    store = tmp_path / "run.zarr"
    args = ["optimize", "lora", "--store", str(store), "--workers", "1", "--dashboard-address", "none"]
    stopped = mugraph(*args, "--time-limit", "1", "--json", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    before = mugraph("show", str(store), cwd=tmp_path).stdout
    assert "run NOT complete (best so far; run `mugraph optimize lora" in before, before
    with open_existing(store, readonly=False):
        shown = mugraph("show", str(store), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"run NOT complete (best so far; a run is going on with it now, pid {os.getpid()})" in shown.stdout
    assert "to resume" not in shown.stdout.splitlines()[-1]
