"""The one error of the codegen stage."""

from __future__ import annotations

from mugraph.ir.errors import MugraphError


class CodegenError(MugraphError):
    """A μGraph cannot be emitted as Triton code, or the emitted module cannot be run or checked."""


KERNELS_EXTRA_HINT = "install it with: pip install -e '.[kernels]'"
