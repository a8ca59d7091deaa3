"""The torch front and back end's errors, and the one check that torch is there at all."""

from __future__ import annotations

import importlib.util

from mugraph.ir.errors import MugraphError

# The docs' install, from a checkout: an unpinned torch from PyPI is a CUDA build of several GB, so a
# machine without a GPU takes a CPU build first.
TORCH_EXTRA_HINT = (
    "install the torch extra from mugraph's checkout: pip install -e '.[torch]' (without a GPU, a CPU "
    "build of torch first: pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)


class TorchError(MugraphError):
    """Something about a PyTorch model or a loaded module that a person must fix."""


class CaptureError(TorchError):
    """A model cannot be captured: torch.export refuses it, or one of its ops can be neither lowered to
    mugraph's IR nor run by PyTorch as glue. The message names the op and its source line."""


class NothingLowered(CaptureError):
    """No op of the captured model lowers to mugraph's IR: nothing to optimise."""


class TrainingModeError(CaptureError):
    """The model (or one of its submodules) is in training mode: the user calls `model.eval()` first."""


class InputMismatchError(TorchError, ValueError):
    """The module was called with inputs of other shapes or dtypes than it was optimised for."""


class TracingError(TorchError):
    """An optimized module was given to torch.jit.trace or torch.export, which cannot follow its kernels."""


class TorchUnavailableError(TorchError):
    """PyTorch is not installed (it is an optional extra)."""


def require_torch() -> None:
    """One clear error where torch is missing, before anything imports it."""
    if importlib.util.find_spec("torch") is None:
        raise TorchUnavailableError(f"PyTorch is not installed; {TORCH_EXTRA_HINT}")
