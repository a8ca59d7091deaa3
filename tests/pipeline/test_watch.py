"""The driver's view of its cluster is a few seconds old: a worker that joined a run started with none,
ran a task and was killed between two views was never seen, and its leaving went unsaid (the run then
waits in silence). A result is evidence of a worker."""

from __future__ import annotations

from typing import Any

from mugraph.pipeline.events import Event
from mugraph.pipeline.records import SearchTaskResult
from mugraph.pipeline.watch import ClusterWatch


def _result(**extra: Any) -> SearchTaskResult:
    return SearchTaskResult(path=(), found=(), frontier=(), counters={"seconds": 0.1}, worker="w1", **extra)


def test_a_worker_seen_only_through_its_result_is_said_to_leave() -> None:
    said: list[Event] = []
    watch = ClusterWatch(0, said.append)  # the run started before any worker joined
    watch.search_result(_result())
    watch.workers_now(0, 12.0)
    watch.workers_now(0, 17.0)
    watch.workers_now(2, 30.0)
    assert [(e["event"], e.get("workers")) for e in said] == [("workers", 0), ("workers", 2)]


def test_a_failed_memo_is_said_once() -> None:
    said: list[Event] = []
    watch = ClusterWatch(1, said.append)
    for _ in range(3):
        watch.search_result(_result(memo_error="Connection refused"))
    lost = {"event": "memo_lost", "worker": "w1", "error": "Connection refused", "cause": None}
    assert [dict(e) for e in said] == [lost]
