"""A scale trace made from a real run store (benchmarks/store_trace.py): one task per done row, each
with its own seconds, its children as its frontier, each stored μGraph under the task that explored
its path (sibling runs included), pending rows as the unrun frontier; and, end to end, the trace of
a real 2-worker `optimize` replays to the same μGraphs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_scale import ROOT, replay, summarize, trace_stats
from scale_trace import TraceTask, read_trace, write_trace
from store_trace import trace_from_store

from mugraph.pipeline.commit import fragment_record
from mugraph.pipeline.driver import COUNTER_NAMES
from mugraph.pipeline.plan import make_plan
from mugraph.programs.registry import get_builtin
from mugraph.stages.search.task_paths import sibling_run, split_run, task_budget
from mugraph.storage.run.store import FoundRecord, RunStore, TaskCompletion
from tests.helpers.cli_runs import done, mugraph, optimize_args
from tests.helpers.graphs import digest_of as D
from tests.helpers.graphs import graph_of as G
from tests.helpers.narrow import NARROW

BUDGET = 40
PLAN = make_plan(get_builtin("rms_norm"), None, NARROW["rms_norm"], BUDGET)
COMMAND = ["optimize", "rms_norm", "--workers", "15", "--time-limit", "60"]


def new_store(path: Path) -> RunStore:
    st = RunStore.open(path, PLAN.identity, meta={"command": COMMAND}, counter_names=COUNTER_NAMES)
    st.set_fragments([fragment_record(PLAN.fragments[0])])
    st.add_tasks([(0, (), -1)])
    return st


def found(key: str, path: tuple[int, ...], row: int) -> FoundRecord:
    return FoundRecord(0, D(key), path, G(key), row)


def done_task(row: int, seconds: float, kids: list[tuple[int, ...]], *finds: FoundRecord) -> TaskCompletion:
    return TaskCompletion(row, {"seconds": seconds, "nodes": 3.0}, "w", finds, kids)


def by_path(tasks: list[TraceTask]) -> dict[tuple[int, ...], TraceTask]:
    return {t.path: t for t in tasks}


def test_a_partial_store_becomes_the_trace_of_its_done_tasks(tmp_path: Path) -> None:
    run2, run42 = sibling_run((2,), 0), sibling_run((1, 4), 2)
    with new_store(tmp_path / "run.zarr") as st:
        # the root hands on (1,), a run of (2,)'s kept children and (3,), which never runs
        [kids] = st.complete_tasks(
            [done_task(0, 0.5, [(1,), run2, (3,)], found("a", (0, 1), 0), found("f", (3, 0), 0))]
        )
        one, two, _ = kids
        [[r42], [r25]] = st.complete_tasks(
            [
                done_task(one, 0.25, [run42], found("b", (1, 4, 1, 0), one)),
                done_task(two, 0.125, [(2, 5)], found("d", (2, 7, 1), two)),
            ]
        )
        st.complete_tasks(
            [
                done_task(r42, 1.0, [], found("c", (1, 4, 3, 0), r42)),
                done_task(r25, 2.0, [], found("e", (2, 5, 0), r25)),
            ]
        )
    header, tasks = trace_from_store(tmp_path / "run.zarr")
    got = by_path(tasks)
    assert set(got) == {(), (1,), run2, run42, (2, 5)}
    assert got[()].frontier == ((1,), run2, (3,)) and got[run2].frontier == ((2, 5),) and got[(2, 5)].frontier == ()
    # each μGraph under the deepest task covering its path: a run covers its first child on, a plain
    # path at a run's depth is the more specific; one under the pending (3,) is dropped with it
    owners = {d: t.path for t in tasks for d, _, _ in t.found}
    assert owners == {D("a"): (), D("b"): (1,), D("c"): run42, D("d"): run2, D("e"): (2, 5)}
    assert [t.seconds for t in tasks] == [0.5, 0.25, 0.125, 1.0, 2.0]
    assert all(t.budget == task_budget(t.path, BUDGET) for t in tasks) and got[()].budget < BUDGET
    assert {t.fragment for t in tasks} == {PLAN.fragments[0].payload.digest}
    assert all(t.result_bytes > 0 for t in tasks)
    assert header["program"] == "rms_norm" and header["budget"] == BUDGET
    assert header["settings"] == NARROW["rms_norm"]  # rebuilt from the stored config
    assert not header["complete"] and header["unrun_frontier"] == 1 and header["unrun_found"] == 1
    assert [p for t in tasks for p in t.frontier if p not in got] == [(3,)]  # the replay drops it
    assert header["workers"] == 15 and header["time_limit"] == 60.0 and header["store"] == "run.zarr"
    assert header["found_owner_mismatch"] == 0 and header["stub_roots"] == 0
    # the trace file round-trips, and its critical path follows the frontier: root, (2,…), (2, 5)
    write_trace(tmp_path / "t.jsonl.gz", header, tasks)
    again = read_trace(tmp_path / "t.jsonl.gz")
    assert again[0] == header and again[1] == tasks
    assert trace_stats(tasks)["critical_path"] == pytest.approx(0.5 + 0.125 + 2.0)


def test_a_store_whose_root_never_finished_replays_an_empty_root(tmp_path: Path) -> None:
    new_store(tmp_path / "run.zarr").close()
    header, tasks = trace_from_store(tmp_path / "run.zarr")
    assert [(t.path, t.seconds, t.frontier, t.found) for t in tasks] == [((), 0.0, (), ())]
    assert header["stub_roots"] == 1 and not header["complete"] and header["unrun_frontier"] == 1


@pytest.mark.slow
def test_the_trace_of_a_real_run_replays_its_tasks_and_mugraphs(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"  # narrowed lora: hundreds of tasks, sibling runs, a μGraph found in one
    last = done(mugraph(*optimize_args("lora", store, "--workers", "2", budget=BUDGET), cwd=tmp_path))
    assert last["complete"]
    header, tasks = trace_from_store(store)
    with RunStore.open_existing(store) as st:
        rows = st.tasks()
        stored = set(st.found(0))
    assert len(tasks) == sum(t.done for t in rows) == last["tasks_run"] > 10
    assert header["complete"] and header["unrun_frontier"] == 0 and header["workers"] == 2
    keys = {t.path for t in tasks}
    assert all(p in keys for t in tasks for p in t.frontier)
    assert {d for t in tasks for d, _, _ in t.found} == stored == set(last["mugraphs"]) != set()
    assert header["found_owner_mismatch"] == 0  # each μGraph under the row that the store says found it
    assert any(split_run(t.path) is not None and t.found for t in tasks)
    assert sum(t.seconds for t in tasks) == pytest.approx(sum(t.counters["seconds"] for t in rows))
    trace = tmp_path / "trace.jsonl.gz"
    write_trace(trace, header, tasks)
    stats = trace_stats(tasks)
    row = summarize(replay(trace, ROOT, workers=2, scale=0.0, tmp=tmp_path, processes=1), stats, tasks)
    assert row["complete"] and row["tasks"] == len(tasks)
    assert row["same_mugraphs"] and set(row["mugraphs_found"]) == stored
    assert header["settings"] == NARROW["lora"] and header["program"] == "lora"
