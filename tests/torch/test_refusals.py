"""What `mugraph.optimize` refuses, in one clear error before anything starts: a misspelt option, an op
that can be neither lowered nor run as glue (named with its source line, from Python and from a model
file), a model in training mode, a machine without Triton; and that the core install does not need
torch at all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

import mugraph
from mugraph.api import OptionError
from mugraph.codegen.errors import CodegenError
from mugraph.programs.loader import ProgramLoadError, resolve_program
from mugraph.torch.capture import capture
from mugraph.torch.errors import CaptureError, TrainingModeError
from tests.helpers import torch_models
from tests.helpers.torch_models import Branchy, GeluLinear, build, inputs

ROOT = Path(__file__).resolve().parents[2]


def test_a_misspelt_option_is_refused_naming_it_and_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(OptionError) as e:
        mugraph.optimize(build(GeluLinear), inputs((16, 32)), worker=1, store=tmp_path / "s.zarr")  # type: ignore[call-arg]
    text = str(e.value)
    assert "'worker' (did you mean 'workers'?)" in text and "budget" in text and "settings" in text
    assert len(text.splitlines()) == 1 and isinstance(e.value, TypeError)
    assert not (tmp_path / "s.zarr").exists()  # refused before the store was made


@pytest.mark.parametrize("option", [{"workers": -1}, {"workers": 0}, {"budget": 0}, {"measure": -1}])
def test_a_count_out_of_range_is_refused_before_anything_starts(tmp_path: Path, option: dict[str, Any]) -> None:
    """workers=-1 once started a cluster of no workers that never ran a task."""
    ((name, value),) = option.items()
    with pytest.raises(OptionError, match=f"{name}={value}: give a whole number of at least"):
        mugraph.optimize(build(GeluLinear), inputs((16, 32)), store=tmp_path / "s.zarr", **option)
    assert not (tmp_path / "s.zarr").exists()


def _line_of(text: str) -> int:
    """The line of `text` in the file that defines the models (where the error must point)."""
    source = Path(torch_models.__file__)
    return next(i for i, ln in enumerate(source.read_text().splitlines(), 1) if text in ln)


def test_an_op_neither_lowered_nor_glue_is_named_with_its_source_line(tmp_path: Path) -> None:
    with pytest.raises(CaptureError) as e:
        mugraph.optimize(Branchy().eval(), inputs((16, 16)), store=tmp_path / "s.zarr")
    text = str(e.value)
    assert len(text.splitlines()) == 1 and text.startswith("cond (")
    assert f"{Path(torch_models.__file__).name}:{_line_of('torch.cond(x.sum()')}" in text
    assert not (tmp_path / "s.zarr").exists()


def test_a_model_file_with_such_an_op_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""
        import torch
        from tests.helpers.torch_models import Branchy

        model = Branchy().eval()
        example_inputs = (torch.ones(16, 16, dtype=torch.float16),)
    """)
    )
    with pytest.raises(ProgramLoadError, match=r"model\.py: cond \(cond, at .*torch_models\.py:\d+\) can be neither"):
        resolve_program(str(tmp_path / "model.py"))


def test_a_capture_error_names_the_models_line_not_torchs_generated_code(tmp_path: Path) -> None:
    """torch.export stops inside code it made at run time (`<string>`) between the call and the
    model's line: the error names the model's line."""
    (tmp_path / "kwnone.py").write_text(
        textwrap.dedent("""
        import torch

        class M(torch.nn.Module):
            def forward(self, x, residual=None):
                return x + residual

        model = M().eval()
        example_inputs = (torch.ones(16, 16, dtype=torch.float16),)
    """)
    )
    with pytest.raises(ProgramLoadError, match=r"torch\.export cannot capture M at \S*kwnone\.py:6: TypeError"):
        resolve_program(str(tmp_path / "kwnone.py"))


def test_importing_mugraph_does_not_import_torch() -> None:
    """torch is an optional extra: the package, its library entry and its command line import without it,
    and where it is missing `optimize` says how to install it."""
    code = textwrap.dedent("""
        import sys
        import mugraph, mugraph.api, mugraph.cli
        assert "torch" not in sys.modules, "torch imported"
        sys.modules["torch"] = None  # as if not installed
        try:
            mugraph.optimize(lambda x: x, ())
        except Exception as e:
            print(type(e).__name__, e)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == (
        "TorchUnavailableError PyTorch is not installed; install the torch extra from mugraph's checkout: "
        "pip install -e '.[torch]' (without a GPU, a CPU build of torch first: "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu)"
    )  # one line, the install the docs give


class DropoutMLP(torch.nn.Module):
    """A linear layer, dropout and GELU: in training mode its output is random, in eval mode it is not."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 64, bias=False)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.drop(self.fc(x)))


def test_a_model_in_training_mode_is_refused_before_capture(tmp_path: Path) -> None:
    """Captured in eval mode, a training-mode model with dropout would be optimised into another
    function than the one the user holds: refused, naming the submodule, with nothing created."""
    model = DropoutMLP().half()
    x = inputs((16, 32))
    assert not torch.equal(model(*x), model(*x))  # training mode: dropout makes every call differ
    with pytest.raises(CaptureError) as e:
        mugraph.optimize(model, x, store=tmp_path / "s.zarr")
    text = str(e.value)
    assert len(text.splitlines()) == 1
    assert text.startswith("DropoutMLP is in training mode; call model.eval() first") and "drop" in text
    assert isinstance(e.value, TrainingModeError)
    assert list(tmp_path.iterdir()) == []  # no store, no exported program
    assert model.training and model.drop.training  # the model is left as the user holds it
    model.fc.eval()  # one submodule still training is enough to refuse
    with pytest.raises(TrainingModeError, match=r"in training mode: the model itself, drop \(Dropout\)\)"):
        mugraph.optimize(model, x, store=tmp_path / "s.zarr")
    model.training = False  # the model itself in eval mode, its dropout not
    submodules = r"^DropoutMLP has submodules in training mode; .*: drop \(Dropout\)\)$"
    with pytest.raises(TrainingModeError, match=submodules):
        mugraph.optimize(model, x, store=tmp_path / "s.zarr")
    model.eval()
    assert capture(model, x).lowering.graph.ops  # in eval mode the same model is captured


def test_without_triton_a_torch_run_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The returned module runs Triton kernels: without Triton, the run would search its whole time
    limit and fail at the end; it is refused first, in one line saying how to install it."""
    monkeypatch.setitem(sys.modules, "triton", None)  # as if not installed (find_spec then finds nothing)
    with pytest.raises(CodegenError) as e:
        mugraph.optimize(build(GeluLinear), inputs((16, 32)), store=tmp_path / "s.zarr", time_limit="5m")
    text = str(e.value)
    assert len(text.splitlines()) == 1 and text.startswith("Triton is not installed")
    assert "pip install -e '.[torch]'" in text
    assert list(tmp_path.iterdir()) == []


def test_without_triton_the_command_refuses_a_model_file_before_searching(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""
        from tests.helpers.torch_models import GeluLinear, build, inputs

        model = build(GeluLinear)
        example_inputs = inputs((16, 32))
    """)
    )
    code = "import sys; sys.modules['triton'] = None; from mugraph.cli import main; main(sys.argv[1:])"
    args = ["optimize", "model.py", "--store", str(tmp_path / "s.zarr"), "--time-limit", "5m"]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("mugraph: error:")]
    assert len(errors) == 1 and "Triton is not installed" in errors[0]
    assert "starting" not in proc.stderr and not (tmp_path / "s.zarr").exists()


def test_triton_imported_before_mugraph_is_refused_before_the_search(tmp_path: Path) -> None:
    """Without a CUDA device the kernels run in Triton's interpreter, which must be chosen before Triton
    is first imported; a script that imports Triton first (as `import transformers` does) is told so in
    one line before anything is searched or stored, and TRITON_INTERPRET=1 is the way out."""
    code = textwrap.dedent(f"""
        import os
        os.environ.pop("TRITON_INTERPRET", None)
        import triton  # noqa: F401 (what transformers does at import)
        import torch, mugraph
        from mugraph.codegen.errors import CodegenError
        try:
            mugraph.optimize(torch.nn.Linear(8, 8).eval(), (torch.randn(4, 8),), store={str(tmp_path / "s.zarr")!r})
        except CodegenError as e:
            print(e)
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Triton was imported before mugraph"), proc.stdout + proc.stderr[-2000:]
    assert "TRITON_INTERPRET=1" in proc.stdout
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize(
    "model, x, cause",
    [
        (nn.Linear(128, 64).half(), torch.randn(2, 2, 2, 2, 128, dtype=torch.float16), "its values have 5 dims"),
        (nn.Linear(8, 4).double(), torch.randn(4, 8, dtype=torch.float64), "its tensors are torch.float64"),
        (nn.Linear(64, 64).half(), torch.randn(0, 64, dtype=torch.float16), "input has a dimension of size 0"),
        (nn.Embedding(10, 8), torch.tensor([[1, 2, 3]]), "its ops (embedding) are none of those"),
    ],
    ids=["five-dims", "float64", "empty-batch", "embedding"],
)
def test_a_model_with_nothing_lowered_is_told_why(model: nn.Module, x: torch.Tensor, cause: str) -> None:
    with pytest.raises(CaptureError, match="nothing to optimise") as e:
        capture(model.eval(), (x,))
    assert cause in str(e.value)


class _KeywordOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 64)

    def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.a(x) + bias
        return out


def test_example_inputs_a_forward_cannot_take_are_named_before_export() -> None:
    """torch.export failed inside the standard library's `inspect`, and said so as the place."""
    with pytest.raises(CaptureError, match="missing a required argument: 'bias'") as e:
        capture(_KeywordOnly().half().eval(), inputs((16, 32)))
    assert "passed by position" in str(e.value) and "inspect.py" not in str(e.value)


class _MixedDtypes(nn.Module):
    """An fp16 model whose norm computes in float32 and never casts back: the linear after it refuses
    the float32 value when run, which an export (shapes and dtypes traced, no matmul run) lets pass."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(64))
        self.fc = nn.Linear(64, 128, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        out: torch.Tensor = self.fc(self.weight * h)
        return out


def test_a_model_that_fails_when_run_is_told_so_not_nothing_to_optimise() -> None:
    model = _MixedDtypes().half().eval()
    x = torch.randn(2, 8, 64, dtype=torch.float16)
    with pytest.raises(CaptureError, match="the model fails on its example inputs, run as written: RuntimeError: "):
        capture(model, (x,))


def test_a_model_that_fails_on_its_inputs_is_refused_before_the_search(tmp_path: Path) -> None:
    """int8 inputs to fp16 linears: torch.export's fake tensors let them pass, and the search ran to the
    end before the model itself was first run (a raw RuntimeError then)."""
    (x,) = inputs((16, torch_models.D))
    with pytest.raises(CaptureError, match="the model fails on its example inputs, run as written: RuntimeError"):
        mugraph.optimize(build(torch_models.GeluMLP), (x.to(torch.int8),), store=tmp_path / "s.zarr", verbose=False)
    assert not (tmp_path / "s.zarr").exists()


class _Outputs(NamedTuple):
    logits: torch.Tensor
    hidden: torch.Tensor


class _NamedOutputs(nn.Module):
    """A forward returning a NamedTuple, which torch.export traces but cannot save."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32, bias=False)

    def forward(self, x: torch.Tensor) -> _Outputs:
        h = torch.nn.functional.gelu(self.fc(x))
        return _Outputs(h * 2.0, h)


def test_a_namedtuple_output_is_refused_in_one_line_leaving_no_file(tmp_path: Path) -> None:
    store = tmp_path / "runs" / "s.zarr"
    with pytest.raises(CaptureError, match=r"namedtuple .*; return a tuple or a dict from forward instead") as e:
        x = inputs((16, 32), dtype=torch.float32)
        mugraph.optimize(_NamedOutputs().eval(), x, store=store, workers=1, verbose=False)
    assert len(str(e.value).splitlines()) == 1
    assert not store.exists() and not list(store.parent.glob("*.pt2"))  # no half-written archive left
