"""A PyTorch module in, a drop-in module out, on the CPU (the kernels in Triton's interpreter): one real
run (Dask workers, the private Redis memo, a Zarr store) of a linear layer with erf-GELU, searched
with narrowed limits, then what the returned module promises: the model's outputs (within fp16
rounding, and against torch in float64), the fused erf-GELU kernel, the model's parameter names, new
weights used at the next call, the same module back from the store, and the command-line path on a
model file resuming the same store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import mugraph
from mugraph.codegen import FP16_TOLERANCE
from mugraph.ir.types import OpKind
from mugraph.torch.capture import exported_path
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, GeluLinear, GeluMLP, build, float64_output, inputs, rel_err

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    model: torch.nn.Module
    x: tuple[torch.Tensor, ...]
    module: OptimizedModule
    store: Path
    first: torch.Tensor  # the module's output right after optimize, before any test changed a weight


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    model = build(GeluLinear)
    x = inputs((16, 32))
    store = tmp_path_factory.mktemp("torch") / "gelu.zarr"
    events: list[str] = []
    module = mugraph.optimize(
        model,
        x,
        store=store,
        workers=1,
        settings=GELU_LINEAR_SETTINGS,
        dashboard_address=None,
        on_event=lambda e: events.append(e["event"]),
    )
    assert events[0] == "start" and events[-1] == "done" and events.count("done") == 1
    return Run(model, x, module, store, module(*x))


def test_returned_module_computes_what_the_model_does(run: Run) -> None:
    assert isinstance(run.module, OptimizedModule) and isinstance(run.module, torch.nn.Module)
    out = run.module(*run.x)
    assert out.dtype == torch.float16 and out.shape == (16, 64)
    assert run.module.verdict.self_check is None  # checked, and agreed
    assert run.module.verdict.measured is None  # Triton's interpreter: not timed against the model
    assert rel_err(out, run.model(*run.x)) <= FP16_TOLERANCE  # against the fp16 model
    assert rel_err(out, float64_output(run.model, run.x)) <= FP16_TOLERANCE  # against torch in float64


def test_erf_gelu_is_searched_and_fused_into_the_matmuls_kernel(run: Run) -> None:
    kernels = [op for op in run.module.program.ops if op.kind is OpKind.CUSTOMIZED]
    assert [op.kind for op in run.module.program.ops if op.kind not in (OpKind.INPUT, OpKind.OUTPUT)] == [
        OpKind.CUSTOMIZED
    ]  # one kernel, no torch call
    inside = {op.kind for op in kernels[0].block.ops} if kernels[0].block else set()
    assert {OpKind.MATMUL, OpKind.GELU_ERF} <= inside and OpKind.GELU not in inside


def test_parameters_carry_the_models_names_and_new_values_are_used(run: Run) -> None:
    assert list(run.module.state_dict()) == list(run.model.state_dict()) == ["fc.weight"]
    param = run.model.get_parameter("fc.weight")
    assert run.module.get_parameter("fc.weight") is param  # shared: the model's own parameter
    weight = param.detach().clone()
    other = build(GeluLinear, seed=7)
    try:
        param.data.copy_(other.get_parameter("fc.weight"))  # no version bump: nothing cached may miss it
        assert rel_err(run.module(*run.x), other(*run.x)) <= FP16_TOLERANCE
        run.module.load_state_dict(build(GeluLinear, seed=8).state_dict())
        assert rel_err(run.module(*run.x), build(GeluLinear, seed=8)(*run.x)) <= FP16_TOLERANCE
        assert rel_err(run.module(*run.x), run.first) > 0.1  # the weights did change the output
    finally:
        param.data.copy_(weight)
    assert torch.equal(run.module(*run.x), run.first)


def test_load_gives_the_same_module_back_from_the_store(run: Run) -> None:
    assert exported_path(run.store).is_file()
    loaded = mugraph.load(run.store)
    assert isinstance(loaded, OptimizedModule) and list(loaded.state_dict()) == ["fc.weight"]
    # its own copy, from the exported program saved with the run
    assert loaded.get_parameter("fc.weight") is not run.model.get_parameter("fc.weight")
    assert torch.equal(loaded(*run.x), run.first)
    with pytest.raises(ValueError, match=r"optimised for \[16, 32\]"):
        loaded(torch.zeros(8, 32, dtype=torch.float16))


def test_command_line_on_a_model_file_resumes_the_same_store(run: Run, tmp_path: Path) -> None:
    """`mugraph optimize model.py` captures the same program as `mugraph.optimize` did (same name, shapes
    and limits): it finds the store complete, and the store still gives the same module."""
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""
        from tests.helpers.torch_models import GeluLinear, build, inputs

        name = "GeluLinear"
        model = build(GeluLinear)
        example_inputs = inputs((16, 32))
    """)
    )
    sets = [a for k, v in GELU_LINEAR_SETTINGS.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    args = [
        "optimize",
        "model.py",
        *sets,
        "--store",
        str(run.store),
        "--workers",
        "1",
        "--json",
        "--dashboard-address",
        ":0",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "mugraph.cli", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["complete"] is True and done["store"] == str(run.store)
    assert torch.equal(mugraph.load(run.store)(*run.x), run.first)


def test_calls_from_threads_take_turns_in_the_interpreter(run: Run) -> None:
    """Triton's interpreter keeps the running kernel in process-wide state: two threads calling at once
    failed ("Did you forget to add @triton.jit ?")."""
    got: list[torch.Tensor] = []
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            got.extend(run.module(*run.x) for _ in range(4))
        except BaseException as e:  # reported to the test
            errors.append(e)

    threads = [threading.Thread(target=calls) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == [] and len(got) == 8 and all(torch.equal(g, run.first) for g in got)


def test_a_module_serving_in_a_thread_runs_while_another_thread_exports(run: Run) -> None:
    """torch.export's flag is the process's: a module called in another thread meanwhile was refused
    as if it were being exported."""
    done, served, errors = threading.Event(), [0], []

    def serving() -> None:
        while not done.is_set():
            try:
                assert torch.equal(run.module(*run.x), run.first)
                served[0] += 1
            except BaseException as e:  # reported to the test
                errors.append(e)
                return

    thread = threading.Thread(target=serving)
    thread.start()
    try:
        for _ in range(3):
            torch.export.export(build(GeluMLP), inputs((16, 64)))
    finally:
        done.set()
        thread.join(300)
    assert errors == [] and served[0] > 0
