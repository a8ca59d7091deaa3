"""PyTorch in and out: capture a module or function with torch.export, lower the ATen ops mugraph's IR
has (the rest stays glue that PyTorch runs between fragments), and run a store's chosen μGraphs as a
drop-in `torch.nn.Module`. Needs the torch extra (`pip install -e '.[torch]'`).

Without a CUDA device the kernels run in Triton's interpreter, which must be chosen before Triton is
first imported (its standard functions are decorated then), and torch.export imports Triton: so the
choice is made here, when this package is imported, before any capture.
"""

from __future__ import annotations

import os
import sys


def _choose_interpreter() -> bool:
    """Choose the interpreter where there is no CUDA device; True when that choice came too late
    (another package, `transformers` say, imported Triton before mugraph.torch was imported)."""
    try:
        import torch
    except ImportError:  # not installed: `errors.require_torch` says how to install it
        return False
    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    too_late = "triton" in sys.modules
    os.environ["TRITON_INTERPRET"] = "1"
    return too_late


TRITON_IMPORTED_TOO_EARLY = _choose_interpreter()
