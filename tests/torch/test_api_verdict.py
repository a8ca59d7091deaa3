"""The verdict's notes come from the capture: a heavy op PyTorch runs as glue (here a float32 linear
layer, which is never lowered) is named, a lowered one is not."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mugraph.torch.capture import capture
from mugraph.torch.verdict import FragmentVerdict, Verdict, heavy_glue, is_heavy
from tests.helpers.torch_models import inputs


class HalfAndFloat(nn.Module):
    """An fp16 linear + GELU (lowered) beside a float32 linear (glue)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False).half()
        self.side = nn.Linear(32, 8, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.gelu(self.fc(x)), self.side(x.float())


def test_heavy_ops_left_as_glue_are_named() -> None:
    captured = capture(HalfAndFloat().eval(), inputs((16, 32)))
    glue = heavy_glue(captured)
    assert len(glue) == 1 and glue[0].startswith("linear (") and glue[0][len("linear (") : -1] in captured.lowering.glue
    assert all(not g.endswith(f"({n})") for g in glue for n in captured.lowering.lowered)


def test_heavy_ops_of_other_libraries_are_known_by_their_words() -> None:
    heavy = ["linear", "addmm", "grouped_mm_fallback", "_grouped_mm", "_scaled_mm", "scaled_dot_product_attention"]
    heavy += ["cudnn_convolution", "conv2d", "einsum", "bmm"]
    light = ["mul", "add", "sum", "mean", "silu", "gelu", "layer_norm", "softmax", "split", "view", "comma", "summary"]
    assert all(is_heavy(op) for op in heavy), [op for op in heavy if not is_heavy(op)]
    assert not any(is_heavy(op) for op in light), [op for op in light if is_heavy(op)]


def test_a_printed_verdict_reads_as_the_modules_description_does() -> None:
    kept = FragmentVerdict("f1", "reference", 1.0, 2, 2e-5, 4, "no μGraph found is estimated faster")
    verdict = Verdict(
        "m", True, False, (FragmentVerdict("f0", "a" * 64, 2.0, 1, 1e-5, 3), kept), (), "runs/m.zarr", None, "H100"
    )
    assert str(verdict).splitlines() == [
        f"f0: μGraph {'a' * 16}, 1 kernel, estimated 2.00x faster",
        "f1: kept the reference, because no μGraph found is estimated faster",
        "fragments together: 40.0 μs → 30.0 μs, estimated 1.33x; not priced: any glue run by PyTorch",
        "store: runs/m.zarr",
    ]
    assert repr(verdict).startswith("Verdict(program='m'")  # the record, for a debugger


MODEL_FILE = """
from pathlib import Path

import torch
from torch import nn
import torch.nn.functional as F


class HalfAndFloat(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=False).half()
        self.side = nn.Linear(32, 8, bias=False)

    def forward(self, x):
        return F.gelu(self.fc(x)), self.side(x.float())


model = HalfAndFloat().eval()
example_inputs = (torch.randn(16, 32).half(),)
"""


def test_the_command_line_notes_what_a_model_leaves_to_pytorch(tmp_path: Path) -> None:
    """`mugraph optimize model.py` gives the notes `mugraph.optimize`'s verdict gives: the heavy ops
    PyTorch runs unsearched, and a module that keeps the model's own ops everywhere."""
    from mugraph.programs import resolve_program
    from mugraph.run.printed import _model_notes

    path = tmp_path / "model.py"
    path.write_text(MODEL_FILE)
    program = resolve_program(str(path))
    assert len(program.heavy_glue) == 1 and program.heavy_glue[0].startswith("linear (")
    kept = {"reference": {"f0": {"digest": "r"}}, "best_per_fragment": {"f0": "r"}}
    notes = _model_notes(program, kept)  # type: ignore[arg-type]
    assert notes[0].startswith("  note: 1 heavy op stays glue, run by PyTorch as written and not searched: linear")
    assert notes[1].startswith("  note: every fragment kept the reference")
    chosen = {"reference": {"f0": {"digest": "r"}}, "best_per_fragment": {"f0": "c"}}
    assert len(_model_notes(program, chosen)) == 1  # type: ignore[arg-type]
