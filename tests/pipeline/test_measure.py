"""`optimize --measure K`: the model's best μGraphs timed as compiled Triton kernels on a GPU worker,
stored, and ranked by measured time; without a GPU worker, one clear error before anything starts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mugraph.arrays.backend import cupy_available
from mugraph.storage.run.store import RunStore
from tests.helpers.cli_runs import done, mugraph, optimize_args

HAS_GPU = cupy_available() and importlib.util.find_spec("triton") is not None


@pytest.mark.skipif(cupy_available(), reason="this machine has a GPU: the error is for machines without one")
def test_measure_without_a_gpu_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    proc = mugraph(*optimize_args("rms_norm", store, "--workers", "1", "--measure", "3"), cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--measure times μGraphs on a GPU worker" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not store.exists()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs CuPy with a CUDA device, and Triton")
def test_measure_times_the_top_k_and_ranks_by_measured_time(tmp_path: Path) -> None:
    store = tmp_path / "run.zarr"
    # the whole default space (a GPU machine has the cores for it), so that there are several to order
    args = ["optimize", "rms_norm", "--store", str(store), "--json", "--dashboard-address", "none", "--measure", "3"]
    last = done(mugraph(*args, cwd=tmp_path, timeout=900))
    ranking = last["ranking"]["f0"]
    n = min(3, len(last["mugraphs"])) + 1  # the model's best three (or all there are) and the reference
    assert len(last["mugraphs"]) >= 3 and last["measured"]["f0"] == n
    timed = [r for r in [*ranking, last["reference"]["f0"]] if "measured_seconds" in r]
    assert len(timed) == n and all(r["measured_seconds"] > 0 and r["measured_device"] for r in timed)
    with RunStore.open_existing(store) as st:
        stored = st.ranking(0) or []
        measured = st.measurements(0)
    assert len(measured) == n and all(m["ok"] and m["repeats"] >= 20 for m in measured.values())
    head = [r["measured_seconds"] for r in stored[:n]]
    assert all("measured_seconds" in r for r in stored[:n]) and head == sorted(head)
    assert all("measured_seconds" not in r for r in stored[n:])
    assert last["best"] == stored[0]["digest"]
    sh = mugraph("show", str(store), cwd=tmp_path)
    assert sh.returncode == 0 and "measured" in sh.stdout and "timed rows first" in sh.stdout
    # a rerun times nothing again and keeps the order
    again = done(mugraph(*args, "--workers", "1", cwd=tmp_path))
    assert again["ranking"]["f0"] == ranking and again["tasks_run"] == 0
