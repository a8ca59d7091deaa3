"""Mugraph's worker plugin on a cluster whose machines lack something: one error naming the cluster
and what every machine needs, where a scheduler's traceback came through, and where a worker that
could not start it left the run waiting with no output. A real (in-process) Dask cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from mugraph.ir.errors import MugraphError
from mugraph.run.execute import register_plugin


class NoMugraph(WorkerPlugin):
    def setup(self, worker: object) -> None:
        raise ImportError("No module named 'mugraph'")


class Stuck(WorkerPlugin):
    def setup(self, worker: object) -> None:
        time.sleep(3)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


def test_a_worker_that_cannot_start_the_plugin_is_one_error(client: Client) -> None:
    with pytest.raises(MugraphError, match=r"could not start mugraph on its workers \(.*No module named 'mugraph'"):
        register_plugin(client, NoMugraph(), "tcp://head:8786")


def test_a_registration_that_never_ends_is_one_error(client: Client) -> None:
    t0 = time.monotonic()
    with pytest.raises(MugraphError, match=r"the local Dask cluster did not start mugraph on its workers within 1 s"):
        register_plugin(client, Stuck(), None, timeout=1)
    assert time.monotonic() - t0 < 3
