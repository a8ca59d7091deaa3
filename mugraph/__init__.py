"""mugraph: a multi-level tensor-program superoptimizer built as a staged Dask pipeline.

`mugraph.optimize(model, example_inputs, **options)` takes a PyTorch module (in eval mode) or function
and returns a drop-in `OptimizedModule` running the chosen μGraphs, whose `verdict` says what the search
got; it prints what `mugraph optimize` prints (on stderr; `verbose=False` silences it) and reuses a
finished store. `mugraph.load(store)` gives that module back from a run's store. Both need the torch
extra; importing mugraph does not import torch (or the pipeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mugraph.api import optimize as optimize  # the signature type checkers see: the keywords typed
    from mugraph.torch.runtime import OptimizedModule
else:

    def optimize(model: Any, example_inputs: Any, **options: Any) -> OptimizedModule:
        """Optimise a PyTorch module or function at the shapes of `example_inputs` (see `mugraph.api.optimize`,
        whose keywords these are)."""
        from mugraph.api import optimize as run

        return run(model, example_inputs, **options)


__version__ = "0.1.0"
__all__ = ["OptimizedModule", "__version__", "load", "optimize"]


def load(store: str | Path) -> OptimizedModule:
    """The drop-in module of a run made from a PyTorch model (see `mugraph.api.load`)."""
    from mugraph.api import load as run

    return run(store)


def __getattr__(name: str) -> Any:
    """`mugraph.OptimizedModule`, imported (with torch) only when asked for."""
    if name == "OptimizedModule":
        from mugraph.torch.runtime import OptimizedModule

        return OptimizedModule
    raise AttributeError(f"module 'mugraph' has no attribute {name!r}")
