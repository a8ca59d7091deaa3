"""A model file may give `example_kwargs` next to `example_inputs`, as `mugraph.optimize` takes them: the
file's program is the one Python captures for the same call, and a bad value is an error naming the file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mugraph.programs import load_program
from mugraph.programs.loader import ProgramLoadError

MODEL = """
import torch
import torch.nn.functional as F
from torch import nn

class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(32, 64, bias=False)

    def forward(self, x, *, mask):
        return F.gelu(self.fc(x)).masked_fill(mask, 0.0)

model = Masked().eval()
example_inputs = (torch.randn(16, 32),)
"""


def _file(tmp_path: Path, tail: str) -> Path:
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(MODEL) + textwrap.dedent(tail))
    return path


def test_a_model_file_with_example_kwargs_is_captured_as_python_captures_it(tmp_path: Path) -> None:
    import torch

    from mugraph.torch.capture import capture

    prog = load_program(_file(tmp_path, "example_kwargs = {'mask': torch.zeros(16, 64, dtype=torch.bool)}\n"))
    namespace: dict[str, object] = {}
    exec(compile(textwrap.dedent(MODEL), "model.py", "exec"), namespace)
    mask = torch.zeros(16, 64, dtype=torch.bool)
    captured = capture(namespace["model"], namespace["example_inputs"], "Masked", {"mask": mask})
    assert prog.model_digest == captured.model_digest
    assert prog.name == "Masked"


def test_a_model_file_without_the_keyword_says_so(tmp_path: Path) -> None:
    with pytest.raises(ProgramLoadError, match=r"model\.py"):
        load_program(_file(tmp_path, ""))


def test_a_model_file_with_example_kwargs_that_are_not_tensors_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProgramLoadError, match=r"model\.py: .*example_kwargs\['mask'\] must be a tensor"):
        load_program(_file(tmp_path, "example_kwargs = {'mask': 3}\n"))
