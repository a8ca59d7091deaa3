"""Crashes: `kill -9` of `mugraph optimize` at several points, a worker process killed mid-run, a
store from another run, damaged store files. The record of truth is the store: a resumed run ends
with the μGraphs and task table of an uninterrupted one, and never reruns a task marked done."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

from mugraph.dashboards.report import read_report_data
from mugraph.pipeline.events import Event
from mugraph.pipeline.plan import RunPlan
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import done, mugraph, optimize_args, start

Whole = tuple[dict[str, Any], set[tuple[int, ...]]]
BUDGET = 20  # many small tasks, so a kill lands between and inside them


def kill_after(proc: subprocess.Popen[str], tasks_done: int, timeout: float = 120) -> tuple[dict[str, Any], bool]:
    """SIGKILL once a progress event reports `tasks_done` tasks; the last event seen, and whether
    the invocation started a run (a store found finished is read back: no `start`, no invocation)."""
    assert proc.stdout is not None
    last: dict[str, Any] = {}
    started = False
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        last = json.loads(line)
        started = started or last.get("event") == "start"
        if (last.get("event") == "progress" and last["tasks_done"] >= tasks_done) or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return last, started


def table(store: Path) -> tuple[set[tuple[int, ...]], int]:
    with RunStore.open_existing(store) as st:
        tasks = st.tasks()
        return {t.path for t in tasks}, sum(1 for t in tasks if t.done)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], set[tuple[int, ...]]]:
    cwd = tmp_path_factory.mktemp("whole")
    last = done(mugraph(*optimize_args("lora", cwd / "run.zarr", "--workers", "2", budget=BUDGET), cwd=cwd))
    paths, n_done = table(cwd / "run.zarr")
    assert last["complete"] and n_done == len(paths) == last["tasks_run"]
    return last, paths


def test_kill_9_at_several_points_then_resume(tmp_path: Path, uninterrupted: Whole) -> None:
    whole, whole_paths = uninterrupted
    store = tmp_path / "run.zarr"
    args = optimize_args("lora", store, "--workers", "2", budget=BUDGET)
    done_before = 0
    invocations = 0
    for target in (1, 60, 200):  # early (the first tasks), middle, late
        seen, started = kill_after(start(args, tmp_path, stderr=subprocess.DEVNULL), target)
        invocations += started  # a loaded machine may finish the run before a kill lands
        paths, n_done = table(store)
        # everything reported done before the kill is durable; done counts never go back
        assert n_done >= seen.get("tasks_done", 0) and n_done >= done_before
        done_before = n_done
    final = mugraph(*args, cwd=tmp_path)
    last = done(final)
    # where a kill came after the run's end, the store is read back: no invocation after it
    invocations += "reused, nothing searched" not in final.stderr
    paths, n_done = table(store)
    assert last["complete"] and last["mugraphs"] == whole["mugraphs"] and last["best"] == whole["best"]
    assert paths == whole_paths and n_done == len(paths)
    # no task marked done ran again: the last run did exactly the rest
    assert done_before + last["tasks_run"] == len(whole_paths)
    # the report covers the whole run: every invocation, one timeline, ending at the full task count
    data = read_report_data(Path(last["report"]).read_text())
    assert data["invocations"] == invocations and len(data["restarts"]) == invocations - 1
    elapsed = [s["elapsed"] for s in data["timeline"]]
    assert elapsed == sorted(elapsed) and data["timeline"][-1]["tasks_done"] == len(whole_paths)
    assert data["restarts"] == sorted(data["restarts"]) and all(r > 0 for r in data["restarts"])


@contextlib.contextmanager
def driven_lora(store_path: Path) -> Iterator[tuple[RunPlan, Client, RunStore]]:
    """The narrowed lora plan, a 2-worker local cluster with the plugin, and a fresh store: the
    parts a test needs to run the Driver in-process and reach into the cluster while it runs."""
    from mugraph.pipeline.plan import make_plan
    from mugraph.programs import get_builtin
    from tests.helpers.driven import open_run, search_cluster
    from tests.helpers.narrow import NARROW

    plan = make_plan(get_builtin("lora"), None, NARROW["lora"], BUDGET)
    with search_cluster(workers=2) as client, open_run(store_path, plan) as store:
        yield plan, client, store


def test_a_killed_worker_does_not_change_the_result(tmp_path: Path, uninterrupted: Whole) -> None:
    from mugraph.pipeline.driver import Driver

    whole, whole_paths = uninterrupted
    killed: list[int] = []
    with driven_lora(tmp_path / "run.zarr") as (plan, client, store):
        pids = client.run(os.getpid)

        def on_event(e: Event) -> None:
            if e["event"] == "progress" and e["tasks_done"] >= 50 and not killed:
                pid = sorted(pids.values())[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        result = Driver(plan, store, client, on_event=on_event, progress_interval=0.05).run()
        assert killed, "the run ended before a worker could be killed"
        assert result["complete"] and result["mugraphs"] == whole["mugraphs"] and result["best"] == whole["best"]
        assert {t.path for t in store.tasks()} == whole_paths


def test_losing_the_confirming_worker_moves_its_confirmations(tmp_path: Path, uninterrupted: Whole) -> None:
    """Confirmations are pinned to one worker; killed as the first μGraph is found (its
    confirmation queued there), the run still confirms everything on the worker that is left."""
    from mugraph.pipeline.cluster import confirming_worker
    from mugraph.pipeline.driver import Driver

    whole, _ = uninterrupted
    killed: list[str] = []
    with driven_lora(tmp_path / "run.zarr") as (plan, client, store):
        pids = client.run(os.getpid)
        first = confirming_worker(client)
        assert first is not None

        def on_event(e: Event) -> None:
            if e["event"] == "found" and not killed:
                os.kill(pids[first], signal.SIGKILL)
                killed.append(first)

        result = Driver(plan, store, client, on_event=on_event, progress_interval=0.05, time_limit=300).run()
        assert killed, "nothing was found, so no confirmation was ever pinned"
        assert result["complete"] and result["mugraphs"] == whole["mugraphs"] and result["best"] == whole["best"]
        workers = {c["worker"] for c in store.confirmations(0).values()}
        assert len(workers) == 1 and first not in client.scheduler_info()["workers"]


def test_external_dask_scheduler_and_workers(tmp_path: Path, uninterrupted: Whole) -> None:
    whole, whole_paths = uninterrupted
    sched_file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [
        subprocess.Popen(
            [*dask, "--scheduler-file", str(sched_file), "--port", "0", "--dashboard-address", ":0"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "2", "--nthreads", "1"],
                cwd=tmp_path,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        args = optimize_args("lora", tmp_path / "run.zarr", "--scheduler", address, budget=BUDGET)
        deadline = time.monotonic() + 60
        last = None
        while last is None:
            proc = mugraph(*args, cwd=tmp_path)
            if proc.returncode == 0 or time.monotonic() > deadline:
                last = done(proc)
        assert last["complete"] and last["mugraphs"] == whole["mugraphs"] and last["best"] == whole["best"]
        assert table(tmp_path / "run.zarr")[0] == whole_paths
        report = read_report_data(Path(last["report"]).read_text())  # the report of an external-cluster run
        assert report["tasks"]["done"] == len(whole_paths) and report["chosen"]["f0"]["digest"] == last["best"]
        assert set(report["workers"]) == set(last["worker_busy_seconds"]) and len(report["workers"]) == 2
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)


@pytest.mark.slow  # a run, then refused commands each in a process: about 21 s
def test_wrong_store_bad_program_bad_preset_are_one_line_and_status_2(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    first = mugraph(
        *optimize_args("rms_norm", store, "--workers", "1", "--time-limit", "1s", "--memo-url", "local"), cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    bad_py = tmp_path / "bad.py"
    bad_py.write_text("reference = 1 +\n")
    for args, needle in [
        (optimize_args("lora", store, "--memo-url", "local"), "program"),
        (["optimize", str(bad_py), "--memo-url", "local"], "bad.py"),
        (["optimize", "lora", "--preset", "nope"], "nope"),
        (["optimize", "no_such_program"], "unknown program"),
        (["status", str(tmp_path / "missing.zarr")], "missing.zarr"),
        # another search setting: named with both values, not only the two config digests
        (
            optimize_args("rms_norm", store, "--set", "franges=[16]", "--memo-url", "local"),
            "f0 franges: stored [64], given [16]",
        ),
    ]:
        proc = mugraph(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # the refused run left the store as it was: it still resumes
    again = mugraph(
        *optimize_args("rms_norm", store, "--workers", "1", "--time-limit", "1s", "--memo-url", "local"), cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr


def test_a_damaged_store_is_a_clear_error(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    first = mugraph(
        *optimize_args("rms_norm", store, "--workers", "1", "--time-limit", "2s", "--memo-url", "local"), cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    chunks = sorted(p for p in (store / "tasks").rglob("*") if p.is_file() and p.name != "zarr.json")
    assert chunks
    chunks[0].write_bytes(chunks[0].read_bytes()[:-7])  # truncated
    proc = mugraph(*optimize_args("rms_norm", store, "--workers", "1", "--memo-url", "local"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "damaged" in proc.stderr and "--fresh" in proc.stderr
