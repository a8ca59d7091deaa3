"""Worker processes of a LocalCluster start without Dask's malloc trim variable."""

from __future__ import annotations

import os

from mugraph.pipeline.cluster import dask_client, start_workers


def test_local_cluster_workers_start_without_the_trim_variable(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)  # a user's own setting is passed on
    with dask_client(workers=1, dashboard_address=None) as client:
        start_workers(client)
        got = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert list(got.values()) == [None]
