"""PyTorch in and out: capture a module or function with torch.export, lower the ATen ops mugraph's IR
has (the rest stays glue that PyTorch runs between fragments), and run a store's chosen μGraphs as a
drop-in `torch.nn.Module`. Needs the torch extra (`pip install 'mugraph[torch]'`).

Without a CUDA device the kernels run in Triton's interpreter, which must be chosen before Triton is
first imported (its standard functions are decorated then), and torch.export imports Triton: so the
choice is made here, when this package is imported, before any capture.
"""

from __future__ import annotations

import os


def _choose_interpreter() -> None:
    try:
        import torch
    except ImportError:  # not installed: `errors.require_torch` says how to install it
        return
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_choose_interpreter()
