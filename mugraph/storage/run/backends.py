"""Which run-store backend keeps a store, chosen in one place: every room opens a run store through
`open_store` (the driver, to write) or `open_existing` (status, show, the report, the kernels, the
library's loaders), never through a backend class.

A backend is a pair of openers. The Zarr directory store is the only one registered by default; a
backend for another medium (an object store through fsspec, a database) registers its openers
under a name with `register`, and a store is opened with it by passing that name. What the openers
must do (refuse another run's identity and a second writer, keep find times on resume) is the
contract suite's (tests/helpers/run_contract.py), which a new backend runs before it is registered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mugraph.storage.run.errors import StoreError
from mugraph.storage.run.protocol import RunStoreReader, RunStoreWriter
from mugraph.storage.run.store import RunStore

__all__ = ["DEFAULT_BACKEND", "Backend", "open_existing", "open_store", "register"]


class OpenForRun(Protocol):
    def __call__(
        self,
        path: Path,
        identity: Mapping[str, str],
        *,
        meta: Mapping[str, Any] | None = None,
        counter_names: Sequence[str] = (),
        fresh: bool = False,
    ) -> RunStoreWriter: ...


class OpenExisting(Protocol):
    def __call__(self, path: Path, *, readonly: bool = True) -> RunStoreReader: ...


@dataclass(frozen=True, slots=True)
class Backend:
    """How one backend opens a store: for a run (creating it or checking its identity), or as it is."""

    open: OpenForRun
    open_existing: OpenExisting


DEFAULT_BACKEND = "zarr"
_BACKENDS: dict[str, Backend] = {DEFAULT_BACKEND: Backend(RunStore.open, RunStore.open_existing)}


def register(name: str, backend: Backend) -> None:
    """Make `backend` openable by `name` (a backend that passed the contract suite)."""
    _BACKENDS[name] = backend


def _backend(name: str) -> Backend:
    found = _BACKENDS.get(name)
    if found is None:
        raise StoreError(f"no run-store backend named {name!r}; known: {', '.join(sorted(_BACKENDS))}")
    return found


def open_store(
    path: Path,
    identity: Mapping[str, str],
    *,
    meta: Mapping[str, Any] | None = None,
    counter_names: Sequence[str] = (),
    fresh: bool = False,
    backend: str = DEFAULT_BACKEND,
) -> RunStoreWriter:
    """The store at `path` opened for a run's writer (created if missing; with `fresh`, replaced)."""
    return _backend(backend).open(path, identity, meta=meta, counter_names=counter_names, fresh=fresh)


def open_existing(path: Path, *, readonly: bool = True, backend: str = DEFAULT_BACKEND) -> RunStoreReader:
    """The existing store at `path`, for reading (read-only opens take no lock)."""
    return _backend(backend).open_existing(path, readonly=readonly)
