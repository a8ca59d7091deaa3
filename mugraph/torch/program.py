"""A run store made from a PyTorch model, back as a drop-in `torch.nn.Module`."""

from __future__ import annotations

from pathlib import Path

from mugraph.ir.serialize import loads
from mugraph.storage.run.store import RunStore
from mugraph.torch.capture import Captured, exported_path, load_exported
from mugraph.torch.errors import TorchError
from mugraph.torch.runtime import OptimizedModule


def optimized_module(store: Path, captured: Captured | None = None) -> OptimizedModule:
    """The module running the store's stitched program (its best μGraph per fragment so far), around
    `captured` (the model in this process, whose tensors it then shares) or else the exported program
    saved beside the store; refused where the two were not made together."""
    with RunStore.open_existing(store, readonly=True) as st:
        identity = st.identity
        final = st.final()
    if final is None:
        raise TorchError(f"{store}: no result yet; run `mugraph optimize` on it first")
    share = captured is not None
    if captured is None:
        captured = load_exported(exported_path(store), str(identity.get("program", "model")))
    if captured.digest != identity.get("program_digest"):
        raise TorchError(
            f"{store}: the exported program beside it ({exported_path(store).name}) is not the program "
            "the store was made for; optimise the model again"
        )
    chosen = ", ".join(f"{k}={v[:12]}" for k, v in sorted(final.get("best_per_fragment", {}).items()))
    return OptimizedModule(captured, loads(final["program_graph"]), chosen, share=share)


def load_store(store: Path) -> OptimizedModule:
    """The drop-in module of a run store, from the exported program saved beside it (its own copy of
    the weights)."""
    return optimized_module(store)
