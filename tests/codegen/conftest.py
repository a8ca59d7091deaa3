"""The codegen tests run the emitted kernels in Triton's interpreter (helpers: tests/helpers/emitting.py)."""

from __future__ import annotations

import os

# Triton makes its language functions for the interpreter only if this is set when it is first imported.
os.environ["TRITON_INTERPRET"] = "1"

import pytest

# Without the `kernels` extra these tests skip with the reason (CI installs it, scripts/bootstrap.sh),
# rather than failing on an import deep inside.
pytest.importorskip("triton", reason="needs Triton: pip install -e '.[kernels]'")
