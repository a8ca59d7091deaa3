"""Choosing a run-store backend: every room opens stores through `storage.run.backends`, which
opens the Zarr store by default and any registered backend by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mugraph.storage.run import backends
from mugraph.storage.run.errors import StoreError, StoreMismatch
from mugraph.storage.run.store import RunStore
from tests.helpers.memory_run_store import MemoryRunStore, MemoryRunStores
from tests.helpers.run_store import COUNTERS, IDENTITY

pytestmark = pytest.mark.unit


@pytest.fixture
def memory() -> Iterator[MemoryRunStores]:
    stores = MemoryRunStores()
    backends.register("memory", backends.Backend(stores.open, stores.open_existing))
    yield stores
    del backends._BACKENDS["memory"]


def test_the_default_backend_is_the_zarr_directory_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "run.zarr"
    with backends.open_store(path, IDENTITY, counter_names=COUNTERS) as st:
        assert isinstance(st, RunStore) and st.identity == IDENTITY
    assert path.is_dir()
    with backends.open_existing(path) as again:
        assert again.identity == IDENTITY
    with pytest.raises(StoreMismatch):
        backends.open_store(path, {**IDENTITY, "budget": "5"}, counter_names=COUNTERS)


def test_a_registered_backend_is_opened_by_name_and_writes_nothing_to_disk(
    tmp_path: Path, memory: MemoryRunStores
) -> None:
    path = tmp_path / "run.zarr"
    with backends.open_store(path, IDENTITY, counter_names=COUNTERS, backend="memory") as st:
        assert isinstance(st, MemoryRunStore)
    assert not path.exists()
    with backends.open_existing(path, backend="memory") as again:
        assert again.identity == IDENTITY
    with pytest.raises(StoreError, match="no run store"):
        backends.open_existing(path)  # the default backend looks on disk


def test_an_unknown_backend_is_one_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no run-store backend named 's3'; known: zarr"):
        backends.open_existing(tmp_path, backend="s3")
