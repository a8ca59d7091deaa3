"""The torch tests need the torch extra; CI installs it (scripts/test.sh), so they skip only where torch
cannot be imported at all.

`mugraph.torch` is imported here, before any test module: on a machine without CUDA it chooses Triton's
interpreter, which must happen before Triton is first imported, and some test modules import libraries
that import Triton themselves (transformers)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import mugraph.torch  # noqa: F401
