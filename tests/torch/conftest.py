"""The torch tests need the torch extra; CI installs it (scripts/test.sh), so they skip only where torch
cannot be imported at all.

They run the kernels in Triton's interpreter on CPU tensors, on any machine: TRITON_INTERPRET=1 is set
here, before `mugraph.torch` is imported (the choice must come before Triton is first imported, and
some test modules import libraries that import Triton themselves, transformers). On a CUDA machine the
compiled kernels are checked by `test_cuda.py`, in processes of their own (`-m gpu`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

os.environ["TRITON_INTERPRET"] = "1"

import mugraph.torch  # noqa: F401


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory of its own for the module's tests, as the working directory: the default stores and
    reports are written beside it."""
    cwd, before = tmp_path_factory.mktemp("cwd"), Path.cwd()
    os.chdir(cwd)
    try:
        yield cwd
    finally:
        os.chdir(before)
