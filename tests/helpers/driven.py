"""What a test needs to run the Driver in-process: a local Dask cluster whose workers carry
mugraph's plugin (NumPy fingerprints, no shared memo), and a run store opened for a plan."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from mugraph.storage.run.store import RunStore

if TYPE_CHECKING:
    from distributed import Client

    from mugraph.pipeline.plan import RunPlan


@contextlib.contextmanager
def search_cluster(workers: int = 1, processes: bool = True) -> Iterator[Client]:
    """A client of `workers` single-threaded workers (in worker processes unless `processes` is False)
    with the plugin registered."""
    from distributed import Client, LocalCluster

    from mugraph.pipeline.worker import MugraphPlugin

    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        client.register_plugin(MugraphPlugin(None, "numpy"), name="mugraph")
        yield client


def open_run(path: Path, plan: RunPlan) -> RunStore:
    """The run store at `path` for `plan`, with the driver's counters (made, or opened to resume)."""
    from mugraph.pipeline.driver import COUNTER_NAMES

    return RunStore.open(path, plan.identity, counter_names=COUNTER_NAMES)
