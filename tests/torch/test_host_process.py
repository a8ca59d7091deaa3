"""mugraph as a library inside someone else's process: captures from several threads at once, the
host's other threads keep their prints, `-W error` hosts, and torch's tracers given an optimized
module (a trace once recorded its kernels' outputs as empty tensors)."""

from __future__ import annotations

import io
import logging
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from mugraph.torch.archive import archive_digest
from mugraph.torch.capture import capture, load_exported
from mugraph.torch.errors import TracingError
from mugraph.torch.program import _resume_hint
from mugraph.torch.quiet import quiet_torch
from mugraph.torch.runtime import InputMismatchError, OptimizedModule
from tests.helpers.torch_models import GeluMLP, RMSNorm, build, inputs


def _in_threads(*jobs: Callable[[], object]) -> list[BaseException]:
    """Run each callable in a thread of its own, all started together; what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(jobs))

    def run(job: Callable[[], object]) -> None:
        start.wait()
        try:
            job()
        except BaseException as e:  # reported to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def test_captures_in_threads_take_turns_and_leave_the_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads capturing at once each get their capture; a third thread's prints all arrive, and
    the process's streams are its own again afterwards."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    models = [(build(GeluMLP), inputs((16, 64))), (build(lambda: RMSNorm(64)), inputs((16, 64)))]
    done = threading.Event()
    printed = 0

    def capturing(model: torch.nn.Module, x: torch.Tensor) -> None:
        for _ in range(3):
            assert capture(model, x).lowering.graph.ops

    def printing() -> None:
        nonlocal printed
        while not done.is_set() or printed < 50:
            print("host line")
            printed += 1

    printer = threading.Thread(target=printing)
    printer.start()
    try:
        errors = _in_threads(*(lambda m=m, x=x: capturing(m, x) for m, x in models))
    finally:
        done.set()
        printer.join(60)
    assert errors == []
    assert sys.stdout is out
    assert out.getvalue().count("host line\n") == printed


def test_a_capture_drops_its_own_log_records_and_not_the_hosts() -> None:
    """While a capture holds the export slot, the records its thread logs are dropped and another
    thread's all reach the host's handler."""
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    handler, log = Keep(level=logging.INFO), logging.getLogger("host.app")
    logging.root.addHandler(handler)
    level, logging.root.level = logging.root.level, logging.INFO
    try:
        with quiet_torch():
            log.warning("capture")

            def logging_host() -> None:
                for i in range(20):
                    log.warning("host %d", i)

            host = threading.Thread(target=logging_host)
            host.start()
            host.join(30)
        log.warning("after")
    finally:
        logging.root.removeHandler(handler)
        logging.root.level = level
    assert got == [f"host {i}" for i in range(20)] + ["after"]


def test_loads_in_threads_take_turns(tmp_path: Path) -> None:
    """torch.export.load keeps a process-wide deserializer: two at once failed with 'already set'."""
    captured = capture(build(GeluMLP), inputs((16, 64)))
    path = captured.save(tmp_path / "m.torch.pt2")
    digest = archive_digest(path)
    loaded: list[str] = []
    errors = _in_threads(*(lambda: loaded.append(load_exported(path, "m", digest).digest) for _ in range(4)))
    assert errors == [] and loaded == [captured.digest] * 4


def test_a_host_that_makes_warnings_errors_can_capture_and_call() -> None:
    """torch's own deprecation warnings inside its passes are not the host's to see, and the module
    reads the capture's call spec without deprecated attributes."""
    model, (x,) = build(GeluMLP), inputs((16, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        captured = capture(model, x)
        module = OptimizedModule(captured, captured.lowering.graph, "reference")
        torch.testing.assert_close(module(x), model(x), atol=2e-3, rtol=2e-2)  # fp16


def _reference_module() -> tuple[OptimizedModule, torch.nn.Module, torch.Tensor]:
    model, (x,) = build(GeluMLP), inputs((16, 64))
    captured = capture(model, (x,))
    return OptimizedModule(captured, captured.lowering.graph, "reference", share=True), model, x


def test_torch_tracers_are_refused_and_compile_calls_it_as_it_is() -> None:
    module, model, x = _reference_module()
    with pytest.raises(TracingError, match="trace, export or optimise the model itself"):
        torch.jit.trace(module, (x,))  # type: ignore[no-untyped-call]
    with pytest.raises(TracingError, match="trace, export or optimise the model itself"):
        torch.export.export(module, (x,))
    compiled = torch.compile(torch.nn.Sequential(module, torch.nn.ReLU()), backend="eager")
    with torch.no_grad():
        want = torch.relu(model(x))
    assert torch.allclose(compiled(x), want, rtol=1e-3, atol=1e-3)


def test_a_module_made_directly_says_it_has_no_verdict() -> None:
    module, _, _ = _reference_module()
    assert not hasattr(module, "verdict")


def test_a_stopped_runs_store_says_how_to_resume_it(tmp_path: Path) -> None:
    store = tmp_path / "m.zarr"
    from_file = _resume_hint(store, {"command": ["optimize", "model.py", "--store", str(store)]})
    assert from_file == f"resume it with the command that made it: mugraph optimize model.py --store {store}"
    # a run made with --fresh is resumed without it (it would delete the store), at the store's own path
    fresh = _resume_hint(store, {"command": ["optimize", "model.py", "--fresh", "--store=old.zarr", "--workers", "2"]})
    assert fresh == f"resume it with the command that made it: mugraph optimize model.py --workers 2 --store {store}"
    from_python = _resume_hint(store, {"command": ["optimize", "<torch model GeluMLP>"]})
    assert f"mugraph.optimize(model, example_inputs, store='{store}')" in from_python


def test_a_list_in_place_of_a_tensor_is_said_so() -> None:
    module, _, x = _reference_module()
    with pytest.raises(InputMismatchError, match="input 'x' is a list; the model takes a tensor there"):
        module(x.tolist())


def _two_inputs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a @ b)


def test_keywords_are_bound_by_name_as_the_model_binds_them() -> None:
    """`f(b=B, a=A)` once ran as `f(B, A)`: keywords were flattened in the order given."""
    a, b = inputs((16, 64), (64, 16))
    captured = capture(_two_inputs, (a, b))
    module = OptimizedModule(captured, captured.lowering.graph, "reference")
    want = module(a, b)
    assert torch.equal(module(b=b, a=a), want) and torch.equal(module(a, b=b), want)
    with pytest.raises(InputMismatchError, match=r"'x' is not a parameter of its forward \(which takes a, b\)"):
        module(a, x=b)
    with pytest.raises(InputMismatchError, match=r"input 'a' given twice"):
        module(a, a=a)
    with pytest.raises(InputMismatchError, match=r"input 'b' missing"):
        module(a=a)
    with pytest.raises(InputMismatchError, match="input 'a' is a list; the model takes a tensor there"):
        module([a, b], b=b)
