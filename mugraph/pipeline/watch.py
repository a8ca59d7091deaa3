"""What the driver says of its cluster while a run goes, beyond progress: every worker gone (nothing
runs until one joins, and without `--time-limit` the run would wait in silence), workers back, and a
worker's shared memo failed. A `dask worker` says the last in its own log, which the user of the
command may never read; the driver hears it in the results and says it once."""

from __future__ import annotations

from mugraph.pipeline.events import EventSink
from mugraph.pipeline.records import SearchTaskResult
from mugraph.storage.memo.redis_server import own_server_death

__all__ = ["ClusterWatch"]


class ClusterWatch:
    """Turns the driver's views of the cluster into `workers` and `memo_lost` events, each said once
    when it changes; `workers` is the count the run started with."""

    def __init__(self, workers: int, on_event: EventSink) -> None:
        self.workers = workers
        self.on_event = on_event
        self.memo_said = False

    def workers_now(self, workers: int, seconds: float) -> None:
        """The worker count the scheduler gave: an event where it went to 0, or back up from 0."""
        if (workers == 0) != (self.workers == 0):
            self.on_event({"event": "workers", "workers": workers, "seconds": round(seconds, 3)})
        self.workers = workers

    def search_result(self, result: SearchTaskResult) -> None:
        """A search result: the first that says its worker's shared memo failed is said. A result means a
        worker ran it, whether or not the scheduler's last view (every few seconds) held one: a run that
        started before its worker joined then says the worker's leaving too."""
        if self.workers == 0:
            self.workers = 1
        if result.memo_error is None or self.memo_said:
            return
        self.memo_said = True
        cause = own_server_death(result.memo_error)  # the private server this process started: why it died
        self.on_event({"event": "memo_lost", "worker": result.worker, "error": result.memo_error, "cause": cause})
