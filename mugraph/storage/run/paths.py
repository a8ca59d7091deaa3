"""Every path of a run, named in one place: the store and what lives beside it (the memo directory,
the HTML report, the emitted kernels, a PyTorch model's exported program) or inside it (the writer's
lock). The run, the report, the kernel writer and the torch bridge all read these names from here, so
a store and its neighbours can never disagree about what `NAME.zarr`'s report is called."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mugraph.storage.run.lock import LOCK_NAME

__all__ = ["EXPORTED_META_KEY", "RunPaths"]

# The key of the store's meta that records a PyTorch model's exported program beside it ({"file":
# NAME.torch.pt2, "sha256": its archive digest}): only a run made from a PyTorch model has it.
EXPORTED_META_KEY = "exported_program"


@dataclass(frozen=True)
class RunPaths:
    """The paths of the run whose store is `store`: `NAME.zarr` gives `NAME.zarr.memo/`,
    `NAME.report.html`, `NAME.kernels.py`, `NAME.torch.pt2` and `NAME.zarr/mugraph.lock`."""

    store: Path

    @classmethod
    def of(cls, store: str | Path) -> RunPaths:
        return cls(Path(store))

    @property
    def stem(self) -> str:
        """The store's name without `.zarr`: what every file beside it is named for."""
        return self.store.name.removesuffix(".zarr")

    def _beside(self, suffix: str) -> Path:
        return self.store.with_name(self.stem + suffix)

    @property
    def memo_dir(self) -> Path:
        """The memo secret and private redis-server's data (kept across invocations, so a resumed run
        finds its verdicts again)."""
        return self.store.with_name(self.store.name + ".memo")

    @property
    def report(self) -> Path:
        return self._beside(".report.html")

    @property
    def kernels(self) -> Path:
        return self._beside(".kernels.py")

    @property
    def exported(self) -> Path:
        """A PyTorch model's exported program, whose digest the store records."""
        return self._beside(".torch.pt2")

    @property
    def lock(self) -> Path:
        """The single writer's lock file, inside the store."""
        return self.store / LOCK_NAME

    def staged(self, pid: int) -> RunPaths:
        """The paths of a stand-in store named for process `pid`, beside this one: what a PyTorch run
        writes its exported program under until its own store is open."""
        return RunPaths(self.store.with_name(f"{self.stem}.staged-{pid}.zarr"))
