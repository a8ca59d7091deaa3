"""Run-wide progress: the counters of every invocation of a run added up, sampled over time.

A progress event is the counters the tasks returned, never a read of the store: what earlier
invocations did comes from the store once at start (done tasks' counters, the last timeline
sample's memo counts), and this invocation's search results are added as they arrive. The samples
of this invocation are kept (thinned to at most MAX_SAMPLES, evenly over the invocation) and
written to the store's timeline, so the live page and the report cover the whole run across
restarts.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import cast

from mugraph.pipeline.events import ProgressEvent
from mugraph.pipeline.records import SearchTaskResult
from mugraph.storage.run.run_records import FragmentProgress, ProgressSample
from mugraph.storage.run.task_table import TaskRecord

MAX_SAMPLES = 600
MEMO_LEVELS = ("local_hits", "remote_hits", "misses")
_SUMMED = ("nodes", "solver_calls", "fingerprints")


class RunProgress:
    def __init__(
        self, fragments: Sequence[str], tasks: Sequence[TaskRecord], history: Sequence[Sequence[ProgressSample]]
    ) -> None:
        self.fragments = list(fragments)
        self.counts: dict[str, Counter[str]] = {f: Counter() for f in self.fragments}
        self.busy: dict[str, float] = defaultdict(float)
        for t in tasks:
            if t.done:
                c = self.counts[self.fragments[t.fragment]]
                c["tasks_done"] += 1
                for k in _SUMMED:
                    c[k] += int(t.counters.get(k, 0))
                self.busy[t.worker] += float(t.counters.get("seconds", 0.0))
        last = next((inv[-1] for inv in reversed(history) if inv), None)
        memo = last.get("memo", {}) if last is not None else {}
        self.memo: Counter[str] = Counter({k: int(memo.get(k, 0)) for k in MEMO_LEVELS})
        self.history = [list(inv) for inv in history]
        self.samples: list[ProgressSample] = []
        self.states_this_run = 0
        self._searching_since: tuple[float, int] | None = None  # (seconds, states) at the first event with states

    @property
    def invocation(self) -> int:
        return len(self.history)

    def on_search(self, fragment: int, result: SearchTaskResult) -> None:
        c = self.counts[self.fragments[fragment]]
        c["tasks_done"] += 1
        for k in _SUMMED:
            c[k] += int(result.counters.get(k, 0))
        self.states_this_run += int(result.counters.get("nodes", 0))
        for k in MEMO_LEVELS:
            self.memo[k] += int(result.memo.get(k, 0))
        self.busy[result.worker] += result.seconds

    def event(
        self,
        seconds: float,
        tasks_run: int,
        running: Mapping[str, int],
        pending: Mapping[str, int],
        found: Mapping[str, int],
        confirmed: Mapping[str, int],
    ) -> ProgressEvent:
        """A progress event; `running` and `pending` count search tasks per fragment (running: held by a
        worker; pending: the rest of the submitted frontier)."""
        total = sum(self.counts.values(), Counter())
        if self._searching_since is None and self.states_this_run > 0:
            self._searching_since = (seconds, self.states_this_run)
        lookups = sum(self.memo[k] for k in MEMO_LEVELS)
        per: dict[str, FragmentProgress] = {
            f: {
                "states": c["nodes"],
                "tasks_done": c["tasks_done"],
                "tasks_running": running.get(f, 0),
                "tasks_pending": pending.get(f, 0),
                "mugraphs": found.get(f, 0),
                "confirmed": confirmed.get(f, 0),
            }
            for f, c in self.counts.items()
        }
        return {
            "event": "progress",
            "wall": round(time.time(), 3),
            "seconds": round(seconds, 3),
            "invocation": self.invocation,
            "tasks_done": total["tasks_done"],
            "tasks_running": sum(running.values()),
            "tasks_pending": sum(pending.values()),
            "tasks_run": tasks_run,
            "states": total["nodes"],
            "states_per_s": round(self.states_this_run / seconds, 1) if seconds > 0 else 0.0,
            "states_per_s_searching": self._searching_rate(seconds),
            "mugraphs": sum(found.values()),
            "confirmed": sum(confirmed.values()),
            "solver_calls": total["solver_calls"],
            "fingerprints": total["fingerprints"],
            "memo": {k: self.memo[k] for k in MEMO_LEVELS},
            "memo_local_hit_rate": self.memo["local_hits"] / lookups if lookups else None,
            "memo_remote_hit_rate": self.memo["remote_hits"] / lookups if lookups else None,
            "fragments": per,
            "worker_busy_seconds": {w: round(s, 3) for w, s in sorted(self.busy.items()) if w},
            "estimated_states": None,  # the driver sets the space-size estimate once there is one
        }

    def _searching_rate(self, seconds: float) -> float | None:
        """States per second since the first event that had any: the ETA's rate. The invocation's
        average also counts its start (workers starting, the first task drawing its inputs), in
        which a short run spends most of its first seconds: on gated_mlp's 4.5-s run it made the
        first ETA 25 min. None until two events have states."""
        if self._searching_since is None:
            return None
        since, states = self._searching_since
        return round((self.states_this_run - states) / (seconds - since), 1) if seconds > since else None

    def record(self, event: ProgressEvent) -> None:
        """Keep a sample; past MAX_SAMPLES every other inner sample goes, so they stay even in time."""
        self.samples.append(cast(ProgressSample, {k: v for k, v in event.items() if k != "event"}))
        if len(self.samples) > MAX_SAMPLES:
            self.samples = [self.samples[0], *self.samples[1:-1][::2], self.samples[-1]]

    def past_samples(self) -> list[ProgressSample]:
        return [s for inv in self.history for s in inv]
