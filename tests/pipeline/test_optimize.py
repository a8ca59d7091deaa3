"""`mugraph optimize` end to end on real Dask worker processes, a real Zarr store and a private
redis-server: what it finds equals the serial search, whatever the number of workers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mugraph.ir.canonical import canonical_digest
from mugraph.programs.benchmarks import rms_norm_expert
from mugraph.stages.search.task_paths import Path as SearchPath
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import done, events, mugraph, optimize_args
from tests.helpers.serial import BUDGET, serial_tasks

Run = tuple[Path, dict[str, Any], list[dict[str, Any]]]


def store_paths(store: Path) -> set[SearchPath]:
    with RunStore.open_existing(store) as st:
        tasks = st.tasks()
        assert all(t.done for t in tasks)
        return {t.path for t in tasks}


@pytest.fixture(scope="module")
def serial_rms() -> tuple[set[str], set[SearchPath]]:
    return serial_tasks("rms_norm", BUDGET)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Run:
    cwd = tmp_path_factory.mktemp("two")
    proc = mugraph(*optimize_args("rms_norm", cwd / "run.zarr", "--workers", "2", budget=BUDGET), cwd=cwd)
    return cwd, done(proc), events(proc)


def test_optimize_equals_the_serial_search(two_workers: Run, serial_rms: tuple[set[str], set[SearchPath]]) -> None:
    cwd, last, evs = two_workers
    found, paths = serial_rms
    assert last["complete"] is True
    assert set(last["mugraphs"]) == found  # every find confirmed, none lost, none extra
    assert canonical_digest(rms_norm_expert()) in last["mugraphs"]
    assert store_paths(cwd / "run.zarr") == paths and last["tasks_run"] == len(paths) > 10
    assert last["solver_calls"] > 0 and last["end_to_end_max_rel_err"] < 1e-9
    kinds = [e["event"] for e in evs]
    assert kinds[0] == "start" and "found" in kinds and "confirmed" in kinds and kinds[-1] == "done"
    # every confirmed μGraph ranked once, best first; the narrowed space's fused μGraphs (Mirage's expert
    # among them, measured 0.83x the reference on an H100) are not confidently faster, so the reference
    # is kept and the run says so
    ranking, ref = last["ranking"]["f0"], last["reference"]["f0"]
    assert sorted(r["digest"] for r in ranking) == sorted(last["mugraphs"])
    assert [r["estimated_seconds"] for r in ranking] == sorted(r["estimated_seconds"] for r in ranking)
    assert ranking[0]["speedup"] == pytest.approx(ref["estimated_seconds"] / ranking[0]["estimated_seconds"])
    assert ranking[0]["kernels"] < ref["kernels"]
    assert not ranking[0]["confident"] and last["best"] == ref["digest"]
    assert last["gpu_profile"] == "H100" and all(r["profile"] == "H100" for r in ranking)
    # one layout task per confirmed μGraph, each kept in the store
    assert sum(1 for e in evs if e["event"] == "layout") == len(last["mugraphs"]) == last["layouts_run"]
    with RunStore.open_existing(cwd / "run.zarr") as st:
        assert sorted(st.layouts(0)) == sorted(last["mugraphs"])
        # one worker confirms everything, so the reference's confirm state is built once
        assert len({c["worker"] for c in st.confirmations(0).values()}) == 1
    assert len(last["worker_busy_seconds"]) == 2


def test_rerun_of_a_finished_store_runs_nothing(two_workers: Run) -> None:
    cwd, last, _ = two_workers
    again = done(
        mugraph(
            *optimize_args("rms_norm", cwd / "run.zarr", "--workers", "1", "--profile", "p.html", budget=BUDGET),
            cwd=cwd,
        )
    )
    assert again["tasks_run"] == 0 and again["confirms_run"] == 0 and again["layouts_run"] == 0
    assert (cwd / "p.html").stat().st_size > 1000  # Dask's performance report
    assert again["mugraphs"] == last["mugraphs"] and again["best"] == last["best"]
    assert again["ranking"] == last["ranking"]  # same store, same ranking


def test_rerun_of_a_finished_store_reads_it_back_without_a_cluster(two_workers: Run) -> None:
    """Nothing asked that only a run does: the stored answer, no cluster started (no start event)."""
    cwd, last, _ = two_workers
    proc = mugraph(*optimize_args("rms_norm", cwd / "run.zarr", "--workers", "1", budget=BUDGET), cwd=cwd)
    again = done(proc)
    assert "reused, nothing searched" in proc.stderr and not any(e["event"] == "start" for e in events(proc))
    assert again["tasks_run"] == 0 and again["ranking"] == last["ranking"] and again["best"] == last["best"]
    assert again["expert"] == last["expert"] and again["report"] == last["report"]
    # the store's whole run, said as such (its states were once printed as if searched this time)
    from mugraph.dashboards.console import verdict_lines

    first = verdict_lines(again, "H100")[0]
    assert f"nothing searched this time (the store's run: {again['tasks_done']:,} tasks, {again['states']:,}" in first
    assert again["states"] > 0 and "this run" not in first


def test_a_finished_store_of_other_fragments_is_not_reused(two_workers: Run) -> None:
    """A store another version made, which split the program into other fragment graphs (their search
    spaces differ), is not read back as this run's answer: the run opens it and refuses it."""
    from mugraph.run.outcome import finished
    from mugraph.storage.run.store import RunStore

    cwd, last, _ = two_workers
    with RunStore.open_existing(cwd / "run.zarr") as st:
        identity, frags = dict(st.identity), [(f["name"], f["digest"]) for f in st.fragments()]
    profile, model = "H100", last["ranking"]["f0"][0]["model"]
    assert finished(cwd / "run.zarr", identity, profile, model, frags)
    assert not finished(cwd / "run.zarr", identity, profile, model, [(frags[0][0], "0" * 32)])


def test_a_store_resumes_with_its_own_budget_when_none_is_given(two_workers: Run) -> None:
    cwd, last, _ = two_workers
    args = optimize_args("rms_norm", cwd / "run.zarr", "--workers", "1", budget=BUDGET)
    at = args.index("--budget")
    again = done(mugraph(*args[:at], *args[at + 2 :], cwd=cwd))  # no --budget: the store's, not the default
    assert again["tasks_run"] == 0 and again["mugraphs"] == last["mugraphs"]
    with RunStore.open_existing(cwd / "run.zarr") as st:
        assert st.identity["budget"] == str(BUDGET)


@pytest.mark.slow  # a run ranked twice: about 15 s
def test_another_gpu_profile_ranks_the_finished_store_again(two_workers: Run) -> None:
    cwd, last, _ = two_workers
    a100 = done(
        mugraph(
            *optimize_args("rms_norm", cwd / "run.zarr", "--workers", "1", "--gpu-profile", "a100", budget=BUDGET),
            cwd=cwd,
        )
    )
    assert a100["tasks_run"] == a100["layouts_run"] == 0 and a100["gpu_profile"] == "A100"
    assert sorted(r["digest"] for r in a100["ranking"]["f0"]) == sorted(last["mugraphs"])
    assert a100["reference"]["f0"]["estimated_seconds"] > last["reference"]["f0"]["estimated_seconds"]
    sh = mugraph("show", str(cwd / "run.zarr"), cwd=cwd)
    assert "ranked on A100" in sh.stdout
    back = done(mugraph(*optimize_args("rms_norm", cwd / "run.zarr", "--workers", "1", budget=BUDGET), cwd=cwd))
    assert back["ranking"] == last["ranking"]
    bad = mugraph(*optimize_args("rms_norm", cwd / "run.zarr", "--gpu-profile", "B200", budget=BUDGET), cwd=cwd)
    assert bad.returncode == 2 and "known profiles are: A100, H100, H200" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_status_and_show_read_the_store(two_workers: Run) -> None:
    cwd, last, _ = two_workers
    st = mugraph("status", str(cwd / "run.zarr"), cwd=cwd)
    assert st.returncode == 0 and "complete" in st.stdout and f"{last['tasks_run']:,} done" in st.stdout
    sh = mugraph("show", str(cwd / "run.zarr"), "--all", cwd=cwd)
    kept = last["best"] == last["reference"]["f0"]["digest"]  # the reference kept: nothing fused chosen
    assert sh.returncode == 0 and ("customized" in sh.stdout or kept)
    assert str(last["best"])[:16] in sh.stdout or (kept and "reference" in sh.stdout)
    lines = sh.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "est. time" in line)
    assert all(w in lines[head] for w in ("kernels", "DRAM bytes", "FLOPs", "speedup"))
    table = lines[head + 1 : head + 2 + len(last["mugraphs"])]
    first = "reference" if last["best"] == last["reference"]["f0"]["digest"] else last["best"][:16]
    assert sum("reference" in line.split()[1:2] for line in table) == 1 and table[0].split()[1] == first
    assert "layouts (shape:innermost dim~swizzled dim):" in sh.stdout and "device tensors: X[16,4096]:1" in sh.stdout
    h200 = mugraph("show", str(cwd / "run.zarr"), "--gpu-profile", "H200", "--json", cwd=cwd)
    rows = json.loads(h200.stdout)["fragments"][0]["ranking"]
    assert {r["profile"] for r in rows} == {"H200"} and len(rows) == len(last["mugraphs"]) + 1
    nope = mugraph("show", str(cwd / "run.zarr"), "--gpu-profile", "nope", cwd=cwd)
    assert nope.returncode == 2 and "known profiles are" in nope.stderr


def test_a_store_ranked_by_another_cost_model_is_ranked_again(two_workers: Run, tmp_path: Path) -> None:
    """A store from a mugraph whose cost model had another name is not read back as finished: the run
    ranks it again (no task), by today's model."""
    cwd, last, _ = two_workers
    shutil.copytree(cwd / "run.zarr", tmp_path / "run.zarr")
    with RunStore.open_existing(tmp_path / "run.zarr", readonly=False) as st:
        st.put_ranking(0, [{**row, "model": "emitted-v1"} for row in st.ranking(0) or []])
    args = optimize_args("rms_norm", tmp_path / "run.zarr", "--workers", "1", "--memo-url", "local", budget=BUDGET)
    proc = mugraph(*args, cwd=tmp_path)
    again = done(proc)
    assert "reused, nothing searched" not in proc.stderr and again["tasks_run"] == 0
    assert {r["model"] for r in again["ranking"]["f0"]} == {last["ranking"]["f0"][0]["model"]} != {"emitted-v1"}
    assert again["ranking"] == last["ranking"]


@pytest.mark.slow  # two more runs on the cluster: about 17 s
def test_user_strides_are_kept_and_change_the_layouts(two_workers: Run, tmp_path: Path) -> None:
    """--layout W=0 (W column-major): every μGraph is laid out again around it, and a finished
    store asked for other strides solves again instead of reusing layouts made for row-major."""
    cwd, last, _ = two_workers
    shutil.copytree(cwd / "run.zarr", tmp_path / "run.zarr")
    args = optimize_args("rms_norm", tmp_path / "run.zarr", "--workers", "1", "--memo-url", "local", budget=BUDGET)
    col = done(mugraph(*args, "--layout", "W=0", cwd=tmp_path))
    assert col["tasks_run"] == 0 and col["layouts_run"] == len(last["mugraphs"]) and col["no_layout"] == {}
    assert col["io_layouts"] == {"f0": {"W": 0}}
    rows = [*col["ranking"]["f0"], col["reference"]["f0"]]
    assert len(rows) == len(last["mugraphs"]) + 1
    assert all(r["layouts"]["kernel"][1] == 0 and r["layouts"]["kernel"][0] == 1 for r in rows)  # W, X
    with RunStore.open_existing(tmp_path / "run.zarr") as st:
        assert all(rec["io_layouts"] == {"W": 0} for rec in st.layouts(0).values())
    # the emitted module takes W row-major whatever the ranking assumed: said, not left to be found
    emitted = mugraph("emit", str(tmp_path / "run.zarr"), "--out", "k.py", "--json", cwd=tmp_path)
    assert "W dim 0" in json.loads(emitted.stdout.splitlines()[-1])["note"], emitted.stderr
    back = done(mugraph(*args, cwd=tmp_path))
    assert back["layouts_run"] == len(last["mugraphs"]) and back["ranking"] == last["ranking"]
    again = mugraph("emit", str(tmp_path / "run.zarr"), "--out", "k.py", "--json", cwd=tmp_path)
    assert "note" not in json.loads(again.stdout.splitlines()[-1]), again.stderr
    bad = mugraph(*args, "--layout", "Y=0", cwd=tmp_path)
    assert bad.returncode == 2 and "not an input or output of rms_norm (they are: X, W, O)" in bad.stderr


# 8 workers on 2 cores: 20 s of the default suite for what 4 already shows (more workers than cores)
@pytest.mark.parametrize("workers", [1, 4, pytest.param(8, marks=pytest.mark.slow)])
def test_same_result_with_other_worker_counts(workers: int, tmp_path: Path, two_workers: Run) -> None:
    cwd0, base, _ = two_workers
    last = done(
        mugraph(
            *optimize_args(
                "rms_norm", tmp_path / "run.zarr", "--workers", str(workers), "--memo-url", "local", budget=BUDGET
            ),
            cwd=tmp_path,
        )
    )
    assert last["mugraphs"] == base["mugraphs"] and last["best"] == base["best"]
    assert store_paths(tmp_path / "run.zarr") == store_paths(cwd0 / "run.zarr")


@pytest.mark.slow  # a decoder block's whole search: about 19 s
def test_transformer_block_is_split_searched_and_stitched(tmp_path: Path) -> None:
    """Four fragments, each searched with its own preset until the time limit; the stitched best
    program equals the transformer block in float64, and the stopped run says it is incomplete."""
    args = [
        "optimize",
        "transformer_block",
        "--store",
        str(tmp_path / "t.zarr"),
        "--workers",
        "2",
        "--json",
        "--time-limit",
        "8s",
        "--memo-url",
        "local",
        "--dashboard-address",
        ":0",
        "--budget",
        "50",
    ]
    evs = events(mugraph(*args, cwd=tmp_path))
    start, last = evs[0], evs[-1]
    assert start["fragments"] == ["f0", "f1", "f2", "f3"]
    assert start["presets"] == {"f0": "mlp", "f1": "attention", "f2": "mlp", "f3": "mlp"}
    assert last["event"] == "done" and last["complete"] is False and last["tasks_run"] > 0
    assert set(last["ranking"]) == {"f0", "f1", "f2", "f3"} and last["end_to_end_max_rel_err"] < 1e-9
    for name, rows in last["ranking"].items():
        # Candidates confidently faster than the reference first, then the rest (the reference sits
        # between them and is not in this list); each group by fitting, then estimated time.
        order = [(not r["confident"], not r["fits"], r["estimated_seconds"]) for r in rows]
        assert order == sorted(order)
        chosen = last["best_per_fragment"][name]
        assert chosen == last["reference"][name]["digest"] or (chosen == rows[0]["digest"] and rows[0]["speedup"] > 1.0)
    st = mugraph("status", str(tmp_path / "t.zarr"), "--json", cwd=tmp_path)
    status = json.loads(st.stdout)
    assert status["complete"] is False and status["tasks"]["pending"] > 0
    assert [f["name"] for f in status["fragments"]] == ["f0", "f1", "f2", "f3"]
    shown = mugraph("show", str(tmp_path / "t.zarr"), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    whole = shown.stdout.split("the whole program: the chosen μGraphs and the glue between them\n", 1)[1]
    names = ("X", "Wq", "Kt", "V", "Wo", "W1", "W2", "W3")  # the program's own inputs and output, no g0:o0
    assert all(f"input {n} [" in whole for n in names) and "as O [" in whole and "g0:" not in whole
    # its kernels, emitted, say they are the best so far of a search that stopped
    emitted = mugraph("emit", str(tmp_path / "t.zarr"), "--out", "k.py", "--json", cwd=tmp_path)
    assert emitted.returncode == 0, emitted.stderr
    assert "stopped before its end: these are its best μGraphs so far" in json.loads(emitted.stdout)["note"]
    assert f"store {tmp_path / 't.zarr'}" in (tmp_path / "k.py").read_text()  # the absolute path
