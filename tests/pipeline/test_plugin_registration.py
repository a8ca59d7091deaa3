"""Mugraph's worker plugin on a cluster whose machines lack something: one error naming the cluster
and what every machine needs, where a scheduler's traceback came through, and where a worker that
could not start it left the run waiting with no output. A real (in-process) Dask cluster."""

from __future__ import annotations

import logging
import time
import warnings
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


def test_a_worker_without_the_memo_secret_says_so_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `dask worker` serves run after run, each registering the plugin again: its log says once that it
    cannot use the shared memo, not once a run."""
    from mugraph.pipeline.worker import MEMO_URL_ENV, worker_memo_url

    monkeypatch.delenv(MEMO_URL_ENV, raising=False)
    monkeypatch.delenv("MUGRAPH_MEMO_KEY", raising=False)
    public = "redis://said-once:6379/0"
    with caplog.at_level(logging.WARNING, logger="mugraph.pipeline.worker"):
        assert worker_memo_url(public) is None and worker_memo_url(public) is None
    said = [r for r in caplog.records if "no memo secret" in r.getMessage()]
    assert len(said) == 1, said


@pytest.mark.parametrize("secret", [False, True])
def test_the_driver_says_which_workers_lack_the_memo_secret(monkeypatch: pytest.MonkeyPatch, secret: bool) -> None:
    """Worker processes started without (or with) $MUGRAPH_MEMO_KEY, given a shared memo: the driver's
    one warning counts those that keep a memo of their own, as only their logs said."""
    from mugraph.pipeline.cluster import dask_client, start_workers
    from mugraph.pipeline.worker import MEMO_URL_ENV, MugraphPlugin
    from mugraph.run.execute import _say_workers_without_secret

    monkeypatch.delenv(MEMO_URL_ENV, raising=False)
    monkeypatch.delenv("MUGRAPH_MEMO_KEY", raising=False)
    with dask_client(workers=2, dashboard_address=":0") as client:
        start_workers(client, {"MUGRAPH_MEMO_KEY": "k" * 32} if secret else {})
        register_plugin(client, MugraphPlugin("redis://127.0.0.1:1/0"), "tcp://head:8786")
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            _say_workers_without_secret(client)
    lines = [str(w.message) for w in said]
    if secret:
        assert lines == []
    else:
        assert len(lines) == 1 and lines[0].startswith("2 of 2 workers have no memo secret in their environment")
