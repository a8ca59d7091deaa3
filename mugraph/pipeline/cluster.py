"""The Dask cluster a run uses: a LocalCluster of worker processes (one thread each, one per core by
default), or an existing cluster reached through its scheduler's address."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import dask.config
from distributed import Client, LocalCluster

from mugraph.cuda.backend import cupy_available
from mugraph.ir.errors import MugraphError
from mugraph.pipeline.malloc_tuning import SPAWN_ENVIRON_OVERRIDES

DEFAULT_DASHBOARD = "127.0.0.1:8787"
# Dask's worker profiler samples the task thread's stack every 10 ms, which cost a search task
# about 5% (gated_mlp, 1 worker: 42.4-43.5 s of task time without it, 44.7-45.3 s with it). Every
# 50 ms keeps the dashboard's profile page, coarser, at a fifth of the samples.
PROFILER_SETTINGS: dict[str, object] = {"distributed.worker.profile.interval": "50ms"}


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def dask_client(
    workers: int | None = None,
    scheduler: str | None = None,
    dashboard_address: str = DEFAULT_DASHBOARD,
    connect_timeout: float = 20.0,
) -> Iterator[Client]:
    """A client on a fresh LocalCluster, or on the cluster at `scheduler` (whose workers were
    started with `dask worker`); both are closed (the LocalCluster stopped) on exit."""
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=connect_timeout)
        except (OSError, TimeoutError) as e:
            raise MugraphError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or default_workers()
    kwargs: dict[str, Any] = {}
    if cupy_available():
        kwargs["resources"] = {"GPU": 1}
    with dask.config.set({**SPAWN_ENVIRON_OVERRIDES, **PROFILER_SETTINGS}):
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=dashboard_address,
            silence_logs=logging.ERROR,
            **kwargs,
        )
    try:
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def gpu_workers(client: Client) -> int:
    """How many workers declared a GPU resource."""
    info = client.scheduler_info()["workers"]
    return sum(1 for w in info.values() if w.get("resources", {}).get("GPU", 0) > 0)


def confirming_worker(client: Client) -> str | None:
    """The worker that takes every confirmation when no worker has a GPU: the first by address.

    A Confirmer holds the reference's outputs on fresh seeds and the values its μGraphs share;
    one worker building that once, rather than every worker building its own, saves most of the
    confirm stage's work. None when the cluster has no worker yet."""
    workers = sorted(client.scheduler_info()["workers"])
    return workers[0] if workers else None
