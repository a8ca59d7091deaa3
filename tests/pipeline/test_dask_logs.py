"""A host that set up logging before importing Dask (its root handler takes Dask's records, since Dask
then gives its `distributed` logger no handler of its own): a local cluster's start and stop add none
of Dask's INFO lines to the host's log, and the host's levels are its own again afterwards."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mugraph.pipeline.cluster import dask_client, start_workers
from mugraph.pipeline.dask_logs import dask_logs_at


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.names.append(record.name)


@pytest.fixture
def host_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Kept]:
    """The root logger at INFO with a handler of the host's; `distributed` without Dask's handler."""
    kept = _Kept()
    monkeypatch.setattr(logging.getLogger("distributed"), "handlers", [])
    monkeypatch.setattr(logging.root, "level", logging.INFO)
    logging.root.addHandler(kept)
    yield kept
    logging.root.removeHandler(kept)


def test_nested_holds_put_the_level_back_once(host_log: _Kept) -> None:
    logger = logging.getLogger("distributed")
    before = logger.level
    with dask_logs_at(logging.ERROR):
        with dask_logs_at(logging.ERROR):
            assert logger.getEffectiveLevel() == logging.ERROR
        assert logger.getEffectiveLevel() == logging.ERROR  # the outer run is still going
        logging.getLogger("distributed.nanny").info("held")
    assert logger.level == before
    assert host_log.names == []


def test_dask_keeps_its_own_handler_to_silence_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("distributed")
    monkeypatch.setattr(logger, "handlers", [logging.NullHandler()])
    before = logger.level
    with dask_logs_at(logging.ERROR):
        assert logger.level == before


def test_a_local_cluster_adds_nothing_to_the_hosts_log(host_log: _Kept) -> None:
    before = logging.getLogger("distributed").level
    with dask_client(workers=1) as client:
        start_workers(client)
        assert len(client.scheduler_info()["workers"]) == 1
    assert [n for n in host_log.names if n.startswith("distributed")] == []
    assert logging.getLogger("distributed").level == before
