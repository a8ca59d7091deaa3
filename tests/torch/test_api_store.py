"""`mugraph.optimize` as a user meets it, on one real run (Dask workers, the private Redis memo, a Zarr
store) of a linear layer with erf-GELU under narrowed limits, in the default store: what it prints, the
verdict the module carries, a second call answered from the finished store without a search, and a
store whose exported program was replaced (a pickled payload, other weights) refused by `mugraph.load`
before torch reads it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import mugraph
from mugraph.stages.layout.emitted import CONSTANTS, TORCH_MODEL
from mugraph.storage.run.errors import StoreDamaged
from mugraph.storage.run.store import RunStore
from mugraph.torch.archive import UnsafeArchiveError
from mugraph.torch.capture import capture, exported_path
from mugraph.torch.errors import TorchError
from mugraph.torch.load_check import LoadCheck, check_loaded
from mugraph.torch.runtime import OptimizedModule
from tests.helpers.store_edits import edit_final_program, first_kind
from tests.helpers.torch_models import GELU_LINEAR_SETTINGS, GeluLinear, build, inputs

OPTIONS: dict[str, Any] = {"workers": 1, "settings": GELU_LINEAR_SETTINGS, "dashboard_address": None}


@dataclass(frozen=True)
class Run:
    model: torch.nn.Module
    x: tuple[torch.Tensor, ...]
    module: OptimizedModule
    store: Path  # absolute
    cwd: Path
    stderr: str
    events: list[str]


@contextlib.contextmanager
def _in(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    model = build(GeluLinear)
    x = inputs((16, 32))
    cwd = tmp_path_factory.mktemp("cwd")
    events: list[str] = []
    err = io.StringIO()
    with _in(cwd), contextlib.redirect_stderr(err):
        module = mugraph.optimize(model, x, on_event=lambda e: events.append(e["event"]), **OPTIONS)
    (store,) = (cwd / "runs").glob("GeluLinear-*.zarr")  # the default store, under ./runs
    return Run(model, x, module, store, cwd, err.getvalue(), events)


def _task_count(store: Path) -> tuple[int, int]:
    with RunStore.open_existing(store) as st:
        return len(st.tasks()), len(st.timeline())


def test_optimize_prints_the_start_line_and_the_verdict_on_stderr(run: Run) -> None:
    lines = run.stderr.splitlines()
    assert lines[0].startswith("mugraph: starting GeluLinear in runs/GeluLinear-") and "1 fragment," in lines[0]
    assert any(ln.startswith("GeluLinear: search finished; ") for ln in lines)
    assert any(ln.startswith("  f0: best is ") and "speedup" in ln for ln in lines)
    assert f"  store: runs/{run.store.name}  (mugraph show runs/{run.store.name})" in lines
    assert any(ln.startswith("  report: runs/GeluLinear-") for ln in lines)


def test_the_module_carries_the_verdict_and_describes_it(run: Run) -> None:
    v = run.module.verdict
    assert v is not None and v.program == "GeluLinear" and v.complete and not v.reused
    assert [f.name for f in v.fragments] == ["f0"]
    (f0,) = v.fragments
    # the search fuses linear + erf-GELU into one kernel, estimated faster than the reference's two
    assert not f0.kept_reference and f0.speedup > 1.0 and f0.kernels == 1 and f0.reason is None
    assert v.faster and v.heavy_glue == () and v.store == f"runs/{run.store.name}"
    text = run.module.describe()
    assert "op, customized = one Triton kernel): customized" in text or "ops, customized = one" in text
    assert f"  f0: μGraph {f0.chosen[:16]}, 1 kernel, estimated {f0.speedup:.2f}x faster" in text.splitlines()
    assert "verdict:" in text and f"store: runs/{run.store.name}" in text
    assert "\n".join(f"  {line}" for line in str(v).splitlines()) in text  # print(fast.verdict): the same lines
    assert f"verdict='f0 {f0.speedup:.2f}x'" in repr(run.module)  # printed, the module says it too


def test_a_pytorch_model_is_ranked_with_its_ops_priced_as_pytorch_runs_them(run: Run) -> None:
    """One call per pre-defined op (PyTorch's fused GELU), not the emitted module's seven array calls."""
    with RunStore.open_existing(run.store) as st:
        ranking = st.ranking(0) or []
    assert ranking and {r["model"] for r in ranking} == {TORCH_MODEL}
    reference = next(r for r in ranking if r["reference"])
    assert reference["emitted_launch_seconds"] == pytest.approx(2 * CONSTANTS.call_seconds)  # matmul, GELU: a call each


def test_a_second_optimize_reuses_the_finished_store_without_a_search(
    run: Run, capfd: pytest.CaptureFixture[str]
) -> None:
    before = _task_count(run.store)
    events: list[str] = []
    t0 = time.perf_counter()
    with _in(run.cwd):
        again = mugraph.optimize(
            run.model, run.x, on_event=lambda e: events.append(e["event"]), verbose=False, **OPTIONS
        )
    seconds = time.perf_counter() - t0
    assert events == ["done"]  # no run: no start, no search task, no progress; the answer alone
    assert _task_count(run.store) == before  # no task added, no invocation recorded
    assert torch.equal(again(*run.x), run.module(*run.x))
    assert again.verdict.reused
    assert again.verdict.fragments == run.module.verdict.fragments
    assert capfd.readouterr().err == ""  # verbose=False prints nothing
    print(f"second mugraph.optimize: {seconds:.2f} s")  # reported, not asserted (shared machine)


def test_a_reused_store_says_so_on_stderr(run: Run) -> None:
    err = io.StringIO()
    with _in(run.cwd), contextlib.redirect_stderr(err):
        mugraph.optimize(run.model, run.x, **OPTIONS)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"mugraph: GeluLinear: the finished store runs/{run.store.name} holds this program")
    assert "reused, nothing searched" in lines[0]
    assert any(ln.startswith("  f0: best is ") for ln in lines)


def test_the_verdict_says_when_fragments_keep_the_reference(run: Run) -> None:
    """A fragment that kept its reference is named with the reason, and a module that runs only
    references says it is no faster."""
    from mugraph.run.outcome import stored_done, verdict_of

    done: dict[str, Any] = dict(stored_done(run.store))
    done["best_per_fragment"] = {"f0": done["reference"]["f0"]["digest"]}  # as if no μGraph had been chosen
    v = verdict_of(done, ("linear (linear_1)",), reused=True)
    (f0,) = v.fragments
    assert f0.kept_reference and f0.speedup == done["reference"]["f0"]["speedup"]
    assert f0.line().startswith("f0: kept the reference, because ")
    notes = v.notes()
    assert notes[0].startswith("1 heavy op stays glue, run by PyTorch as written and not searched: linear")
    assert notes[1].startswith("every fragment kept the reference") and not v.faster


# -- a store handed over: its exported program replaced --------------------------------------------


class _Payload:
    """Unpickled, it runs a shell command: what a store someone hands over could carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[[str], int], tuple[str]]:
        return os.system, (f"touch '{self.marker}'",)


def _copy_store(run: Run, folder: Path) -> Path:
    store = folder / run.store.name
    shutil.copytree(run.store, store)
    shutil.copy(exported_path(run.store), exported_path(store))
    return store


def _rewrite(archive: Path, change: Callable[[dict[str, bytes]], None]) -> None:
    with zipfile.ZipFile(archive) as z:
        root = z.namelist()[0].split("/", 1)[0]
        entries = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    change(entries)
    with zipfile.ZipFile(archive, "w") as z:
        for name, data in entries.items():
            z.writestr(f"{root}/{name}", data)


def _pickled_constant(marker: Path) -> Callable[[dict[str, bytes]], None]:
    def change(entries: dict[str, bytes]) -> None:
        config = json.loads(entries["data/constants/model_constants_config.json"])
        config["config"]["c"] = {"path_name": "tensor_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
        entries["data/constants/model_constants_config.json"] = json.dumps(config).encode()
        entries["data/constants/tensor_0"] = pickle.dumps(_Payload(marker))

    return change


def _pickled_sample_inputs(marker: Path) -> Callable[[dict[str, bytes]], None]:
    def change(entries: dict[str, bytes]) -> None:
        entries["data/sample_inputs/model.pt"] = pickle.dumps(_Payload(marker))

    return change


@pytest.mark.parametrize("plant", [_pickled_constant, _pickled_sample_inputs], ids=["constant", "sample-inputs"])
def test_load_refuses_a_pickled_payload_before_torch_reads_it(
    run: Run, tmp_path: Path, plant: Callable[[Path], Callable[[dict[str, bytes]], None]]
) -> None:
    store = _copy_store(run, tmp_path)
    marker = tmp_path / "ran"
    _rewrite(exported_path(store), plant(marker))
    with pytest.raises(TorchError) as e:
        mugraph.load(store)
    assert not marker.exists()  # the payload never ran
    text = str(e.value)
    assert isinstance(e.value, UnsafeArchiveError) and len(text.splitlines()) == 1
    assert text.startswith(f"{exported_path(store)}: ") and "unpickle" in text


def test_load_refuses_an_archive_the_store_did_not_record(run: Run, tmp_path: Path) -> None:
    """The same program with other weights: a clean archive, but not the one the store was made with."""
    store = _copy_store(run, tmp_path)
    capture(build(GeluLinear, seed=7), run.x).save(exported_path(store))
    with pytest.raises(UnsafeArchiveError, match="not the exported program the store recorded"):
        mugraph.load(store)
    assert torch.equal(mugraph.load(_copy_store(run, tmp_path / "again"))(*run.x), run.module(*run.x))


def test_load_refuses_a_store_whose_program_was_edited(run: Run, tmp_path: Path) -> None:
    """The final record's program with its erf GELU made the tanh one, the record resealed: a module
    off by 1e-3 from the model, had load believed it."""
    store = _copy_store(run, tmp_path)
    edit_final_program(store, first_kind("gelu_erf", "gelu"))
    with pytest.raises(StoreDamaged, match="does not compute the exported model") as e:
        mugraph.load(store)
    assert "final" in str(e.value) and "relative error" in str(e.value)


def test_a_stopped_search_is_resumed_not_reused(tmp_path: Path) -> None:
    """A store stopped by its time limit is not an answer: the next call resumes the search."""
    model, x, store = build(GeluLinear), inputs((16, 32)), tmp_path / "s.zarr"
    stopped = mugraph.optimize(model, x, store=store, time_limit=0.01, verbose=False, **OPTIONS)
    assert not stopped.verdict.complete
    assert "the search stopped at its time limit: call it again to resume" in stopped.verdict.notes()
    assert "fresh" not in " ".join(stopped.verdict.notes())  # the call passed no fresh=True
    starts: list[dict[str, Any]] = []
    done = mugraph.optimize(
        model,
        x,
        store=store,
        verbose=False,
        on_event=lambda e: starts.append(dict(e)) if e["event"] == "start" else None,
        **OPTIONS,
    )
    assert [s["resumed"] for s in starts] == [True]  # the same store, searched on
    assert done.verdict.complete and not done.verdict.reused


def test_a_fresh_stopped_search_is_resumed_without_fresh(tmp_path: Path) -> None:
    """Begun with fresh=True, the call that resumes leaves it out: again it would delete what was done."""
    model, x, store = build(GeluLinear), inputs((16, 32)), tmp_path / "s.zarr"
    stopped = mugraph.optimize(model, x, store=store, time_limit=0.01, fresh=True, verbose=False, **OPTIONS)
    assert "the search stopped at its time limit: call it again without fresh=True to resume" in stopped.verdict.notes()


def test_the_module_runs_its_kernels_in_eval_mode_only(run: Run) -> None:
    """They compute the model's eval-mode forward: in training mode (its own, or a model's holding
    it) the module runs the model's forward instead, until eval()."""
    fast = run.module

    def mode() -> tuple[bool, str]:
        return fast.training, fast.kernels_off or ""

    assert mode() == (False, "")
    torch.nn.Sequential(fast).train()  # a model holding it, set to train
    assert mode()[0] and "training mode" in mode()[1]
    assert fast.eval() is fast and mode() == (False, "")


def test_the_module_pickles_as_its_store_and_its_weights(run: Run) -> None:
    """torch.save, pickle and deepcopy give a module loaded from the run's store again, with the
    weights the module had (here one changed after the run), computing what it computed."""
    import copy

    fast = run.module
    name, weight = next(iter(fast.state_dict().items()))
    saved = weight.clone()
    try:
        with torch.no_grad():
            weight.mul_(0.5)  # the module's own weights, changed since the run (shared with the model)
        want = fast(*run.x)
        buffer = io.BytesIO()
        torch.save(fast, buffer)
        buffer.seek(0)
        copies = [
            torch.load(buffer, weights_only=False),
            pickle.loads(pickle.dumps(fast)),
            copy.deepcopy(fast),
        ]
        for again in copies:
            assert isinstance(again, OptimizedModule) and again is not fast
            assert torch.equal(again.state_dict()[name], weight) and torch.equal(again(*run.x), want)
            assert again.verdict == fast.verdict and again.training is False
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_load_checks_the_module_against_the_exported_program(run: Run) -> None:
    """`mugraph.load` runs the module beside the exported program once, on inputs made from the example
    inputs' shapes: kernels that agree are kept, and the verdict says nothing more."""
    from mugraph.torch import program

    program._CHECKED.clear()
    again = mugraph.load(run.store)
    assert again.load_check == LoadCheck() and again.chosen != "reference"
    assert again.verdict.self_check is None and again.verdict.unchecked is None


def test_load_runs_the_models_program_where_this_machines_kernels_disagree(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel that computes wrong values on this machine (one of Triton's interpreter once did, for
    bf16 dots) makes `mugraph.load` hand back the model's own program, and its verdict say why; a
    pickle of the optimize's module, unpickled here, likewise."""
    from mugraph.torch import program
    from mugraph.torch.kernels import Launcher

    right = Launcher.run

    def off_by_one(self: Launcher, index: int, tensors: dict[int, torch.Tensor], device: Any) -> tuple[int, ...]:
        made = right(self, index, tensors, device)
        if self.program.ops[index].kind.name == "CUSTOMIZED":
            for t in made:
                tensors[t] = tensors[t] + 1
        return made

    monkeypatch.setattr(Launcher, "run", off_by_one)
    program._CHECKED.clear()
    loaded = mugraph.load(run.store)
    assert loaded.chosen == "reference" and loaded.load_check is not None
    said = loaded.verdict.self_check
    assert said is not None and said.startswith("output 0 differs from the model's by")
    note = loaded.verdict.notes()[0]
    assert "on inputs made from the example inputs' shapes and dtypes" in note and "model's own program" in note
    torch.testing.assert_close(loaded(*run.x), run.model(*run.x), atol=1e-5, rtol=1e-5)  # not off by one
    unpickled = pickle.loads(pickle.dumps(run.module))
    assert unpickled.chosen == "reference" and unpickled.verdict.self_check == said
    program._CHECKED.clear()


def test_the_load_check_skips_what_it_cannot_run_fairly(run: Run) -> None:
    """A program that writes its buffers (the check would change them) and one whose outputs vary
    between calls (a random op) are not checked, and the check says why."""

    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.get_buffer("calls").add_(1)
            return x * 2

    x = inputs((16, 32))
    counter = capture(Counter().eval(), x, "Counter")
    assert check_loaded(run.module, counter).skipped == "the program writes to its buffers or inputs"

    class Noisy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.rand_like(x)

    noisy = capture(Noisy().eval(), x, "Noisy")
    assert check_loaded(lambda x: x, noisy).skipped == "the model's outputs differ from one call to the next"
    gelu = capture(run.model, run.x, "GeluLinear")
    assert check_loaded(lambda x: run.model(x) * 2, gelu).mismatch is not None
    assert check_loaded(run.model, gelu) == LoadCheck()
