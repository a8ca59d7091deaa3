"""mugraph: a multi-level tensor-program superoptimizer built as a staged Dask pipeline.

`mugraph.optimize(model, example_inputs, **options)` takes a PyTorch module or function and returns a
drop-in module running the chosen μGraphs; `mugraph.load(store)` gives that module back from a run's
store. Both need the torch extra; importing mugraph does not import torch (or the pipeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__version__ = "0.1.0"
__all__ = ["__version__", "load", "optimize"]


def optimize(model: Any, example_inputs: Any, **options: Any) -> torch.nn.Module:
    """Optimise a PyTorch module or function at the shapes of `example_inputs` (see `mugraph.api.optimize`)."""
    from mugraph.api import optimize as run

    return run(model, example_inputs, **options)


def load(store: str | Path) -> torch.nn.Module:
    """The drop-in module of a run made from a PyTorch model (see `mugraph.api.load`)."""
    from mugraph.api import load as run

    return run(store)
