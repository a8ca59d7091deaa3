"""A run store made from a PyTorch model, back as a drop-in `torch.nn.Module`; and the exported
program's file kept beside the store, whose digest the store records."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mugraph.ir.serialize import loads
from mugraph.stages.verify.stored import stored_program_differs
from mugraph.storage.run.backends import open_existing
from mugraph.storage.run.errors import damaged
from mugraph.storage.run.paths import EXPORTED_META_KEY, RunPaths
from mugraph.storage.run.recorded_command import python_call, resuming_command
from mugraph.storage.run.records import metadata_file
from mugraph.torch.archive import archive_digest
from mugraph.torch.capture import Captured, exported_path, load_exported
from mugraph.torch.errors import TorchError
from mugraph.torch.load_check import LoadCheck, check_loaded
from mugraph.torch.runtime import OptimizedModule

META_KEY = EXPORTED_META_KEY
# what `load_store` found of each store's module in this process, by (store, chosen μGraphs, archive
# digest): a second load, a deepcopy or an unpickling checks nothing again
_CHECKED: dict[tuple[str, str, str], LoadCheck] = {}


def recorded_digest(meta: Mapping[str, Any]) -> str | None:
    """The exported program's digest a store recorded when it was made (None for one made without)."""
    record = meta.get(META_KEY)
    digest = record.get("sha256") if isinstance(record, Mapping) else None
    return digest if isinstance(digest, str) else None


class StagedArchive:
    """The exported program written beside the store under a name of its own, before the store is
    opened: its digest goes into a new store's record, and only then does it take its place."""

    key = META_KEY

    def __init__(self, save_beside: Callable[[Path], None], store: Path) -> None:
        self.target = exported_path(store)
        holder = RunPaths(store).staged(os.getpid()).store
        self.path = exported_path(holder)
        save_beside(holder)
        self.digest = archive_digest(self.path)

    def record(self) -> dict[str, str]:
        return {"file": self.target.name, "sha256": self.digest}

    def place(self, meta: Mapping[str, Any]) -> None:
        """Put the archive in its place where the store records this digest (a new store, or the same
        program and weights again) or none (a store made by an older mugraph); keep the file the store
        recorded otherwise (the model's weights changed since the store was made: the store keeps its
        own, and `mugraph.optimize`'s module holds the model's)."""
        recorded = recorded_digest(meta)
        if recorded is None or recorded == self.digest or not self.target.is_file():
            self.path.replace(self.target)
        else:
            self.path.unlink(missing_ok=True)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


@contextmanager
def staged_archive(save_beside: Callable[[Path], None] | None, store: Path) -> Iterator[StagedArchive | None]:
    """A StagedArchive for a program with an exported file (None for others), removed if not placed."""
    if save_beside is None:
        yield None
        return
    staged = StagedArchive(save_beside, store)
    try:
        yield staged
    finally:
        staged.discard()


def optimized_module(store: Path, captured: Captured | None = None) -> OptimizedModule:
    """The module running the store's stitched program (its best μGraph per fragment so far), around
    `captured` (the model in this process, whose tensors it then shares) or else the exported program
    saved beside the store (checked against the digest the store recorded, and for anything torch
    would unpickle, before torch reads it); refused where the two were not made together."""
    return _store_module(store, captured)[0]


def _store_module(store: Path, captured: Captured | None) -> tuple[OptimizedModule, Captured, str]:
    """`optimized_module`, the capture it was made around, and the digest of the exported program's
    file the store recorded ("" for none)."""
    with open_existing(store, readonly=True) as st:
        identity = st.identity
        meta = dict(st.meta)
        final = st.final()
    if final is None:
        raise TorchError(f"{store}: no result yet: its run stopped before it ended; {_resume_hint(store, meta)}")
    share = captured is not None
    if captured is None:
        name = str(identity.get("program", "model"))
        captured = load_exported(exported_path(store), name, recorded_digest(meta))
    if captured.digest != identity.get("program_digest"):
        raise TorchError(
            f"{store}: the exported program beside it ({exported_path(store).name}) lowers to another program "
            "than the one the store was made for (the model changed, or this version of mugraph lowers it "
            "differently from the one that made the store); optimise the model again"
        )
    program = loads(final["program_graph"])
    why = stored_program_differs(captured.lowering.graph, program)
    if why is not None:  # the store's checksums guard against damage, not against an edit
        raise damaged(
            metadata_file(store, "final"),
            f"the program it holds does not compute the exported model: {why}; it was changed after the run",
        )
    chosen = ", ".join(f"{k}={v[:12]}" for k, v in sorted(final.get("best_per_fragment", {}).items()))
    module = OptimizedModule(captured, program, chosen, share=share)
    module.store_path = store.resolve()  # where pickling finds it again, whatever the working directory
    module.model_digest = identity.get("model_digest")  # what an unpickled copy checks the store against
    module.store_loader = load_store
    return module, captured, recorded_digest(meta) or ""


def _resume_hint(store: Path, meta: Mapping[str, Any]) -> str:
    """How the run of `store` is resumed: the command that made it, or `mugraph.optimize` again."""
    recorded = resuming_command(meta, store)
    if recorded is not None:
        return f"resume it with the command that made it: {recorded}"
    return f"resume it by calling {python_call(store, meta)} again"


def load_store(store: Path) -> OptimizedModule:
    """The drop-in module of a run store, from the exported program saved beside it (its own copy of
    the weights), checked once per process against that program (`load_check`): where its outputs
    differ, the module runs the model's own program, and its `load_check` says what differed."""
    module, captured, archive = _store_module(store, None)
    key = (str(module.store_path), module.chosen, archive)
    found = _CHECKED.get(key)
    if found is None:
        found = _CHECKED[key] = check_loaded(module, captured)
    if found.mismatch is None:
        module.load_check = found
        return module
    reference = OptimizedModule(captured, captured.lowering.graph, "reference")
    reference.model_digest = module.model_digest
    reference.load_check = found
    return reference
