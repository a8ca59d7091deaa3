"""The run-store contract (tests/helpers/run_contract.py) against both backends: the Zarr directory
store on a real disk and the in-memory test store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from mugraph.storage.run.store import RunStore
from tests.helpers.memory_run_store import MemoryRunStore, MemoryRunStores
from tests.helpers.run_contract import Backend, RunStoreContract
from tests.helpers.run_store import COUNTERS, IDENTITY


class ZarrBackend:
    def open(
        self,
        path: Path,
        identity: Mapping[str, str] = IDENTITY,
        *,
        counter_names: Sequence[str] = COUNTERS,
        fresh: bool = False,
    ) -> RunStore:
        return RunStore.open(path, identity, meta={"argv": ["test"]}, counter_names=counter_names, fresh=fresh)

    def open_existing(self, path: Path, *, readonly: bool = True) -> RunStore:
        return RunStore.open_existing(path, readonly=readonly)


class MemoryBackend:
    def __init__(self) -> None:
        self.stores = MemoryRunStores()

    def open(
        self,
        path: Path,
        identity: Mapping[str, str] = IDENTITY,
        *,
        counter_names: Sequence[str] = COUNTERS,
        fresh: bool = False,
    ) -> MemoryRunStore:
        return self.stores.open(path, identity, meta={"argv": ["test"]}, counter_names=counter_names, fresh=fresh)

    def open_existing(self, path: Path, *, readonly: bool = True) -> MemoryRunStore:
        return self.stores.open_existing(path, readonly=readonly)


class TestZarrRunStore(RunStoreContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        return ZarrBackend()


class TestMemoryRunStore(RunStoreContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        return MemoryBackend()
