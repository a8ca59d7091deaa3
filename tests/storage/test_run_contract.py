"""The run-store contract (tests/helpers/run_contract.py) against both backends: the Zarr directory
store on a real disk and the in-memory test store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from mugraph.storage.run import backends
from mugraph.storage.run.protocol import RunStoreReader, RunStoreWriter
from mugraph.storage.run.store import RunStore
from tests.helpers.memory_run_store import MemoryRunStores
from tests.helpers.run_contract import Backend, RunStoreContract
from tests.helpers.run_store import COUNTERS, IDENTITY


class Opened:
    """A backend's two openers as the contract calls them: the suite's identity and counter names
    unless it names others."""

    def __init__(self, backend: backends.Backend) -> None:
        self.backend = backend

    def open(
        self,
        path: Path,
        identity: Mapping[str, str] = IDENTITY,
        *,
        counter_names: Sequence[str] = COUNTERS,
        fresh: bool = False,
    ) -> RunStoreWriter:
        return self.backend.open(path, identity, meta={"argv": ["test"]}, counter_names=counter_names, fresh=fresh)

    def open_existing(self, path: Path, *, readonly: bool = True) -> RunStoreReader:
        return self.backend.open_existing(path, readonly=readonly)


class TestZarrRunStore(RunStoreContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        return Opened(backends.Backend(RunStore.open, RunStore.open_existing))


class TestMemoryRunStore(RunStoreContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        stores = MemoryRunStores()
        return Opened(backends.Backend(stores.open, stores.open_existing))
