"""What the live search page shows, built on the scheduler from the driver's events (see live.py).

Plain Python (no Bokeh, no Dask): `LiveState.apply` takes one event dict at a time. The time series
are rows, one per progress sample, flattened to floats; they stay bounded (past MAX_ROWS every other
inner row goes, so the rows stay even in time). `version` changes with anything the page shows,
`epoch` whenever rows were replaced rather than only appended (a new run, the history of earlier
invocations, a thinning, a new fragment), so a page streams only the new rows while the epoch holds.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

MAX_ROWS = 2000
RATE_WINDOW = 5.0  # seconds: the states/s plotted are the increase over about this long
RECENT = 20  # μGraph events listed on the page

Row = dict[str, float]
Columns = dict[str, npt.NDArray[np.float64]]

# progress-event field -> row key, run-wide totals
TOTALS = {
    "states": "states",
    "states_per_s": "states_per_s",
    "tasks_done": "tasks_done",
    "tasks_running": "tasks_running",
    "tasks_pending": "tasks_pending",
    "solver_calls": "solver_calls",
    "fingerprints": "fingerprints",
    "mugraphs": "mugraphs",
    "confirmed": "confirmed",
    "memo_local_hit_rate": "memo_local",
    "memo_remote_hit_rate": "memo_remote",
    "estimated_states": "estimated_states",
}
# per-fragment field -> row key suffix (the key is f"f{index}_{suffix}")
PER_FRAGMENT = {
    "states": "states",
    "tasks_done": "done",
    "tasks_running": "running",
    "tasks_pending": "pending",
    "mugraphs": "mugraphs",
    "confirmed": "confirmed",
}


class RecentEvent(TypedDict):
    """A μGraph event as the page lists it (found, confirmed or layout)."""

    wall: float
    event: str
    fragment: str
    digest: str


def _num(value: object) -> float:
    """A float for a plot; NaN (a gap) for None or anything that is not a number."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return math.nan


class LiveState:
    def __init__(self) -> None:
        self.version = 0
        self.epoch = 0
        self.reset(None)

    # -- events ----------------------------------------------------------------------------------
    def reset(self, start: Mapping[str, object] | None) -> None:
        # the events as they came (JSON through the scheduler): read with a check of each field
        self.start: dict[str, object] = dict(start or {})
        self.fragments: list[str] = []
        names = self.start.get("fragments")
        self._add_fragments(str(f) for f in (names if isinstance(names, list | tuple) else ()))
        self.rows: list[Row] = []
        self.latest: dict[str, object] = {}  # the newest progress event
        self.workers: dict[str, float] = {}  # worker -> busy seconds, from the newest progress event
        self.done: dict[str, object] | None = None
        self.recent: deque[RecentEvent] = deque(maxlen=RECENT)
        self.counts: Counter[str] = Counter()  # μGraph events of this invocation
        self.best: dict[str, float] = {}  # fragment -> best estimated speedup over its reference so far
        self.inv_seconds: dict[float, float] = {}  # invocation -> its length, from the samples
        self.events = 0
        self.updated = time.time()  # when the last event came
        self._window: deque[Row] = deque()  # the current invocation's latest rows, for its rates
        self._changed(replaced=True)

    def apply(self, event: Mapping[str, object]) -> None:
        """Take one driver event; unknown kinds and malformed fields are ignored."""
        kind = event.get("event")
        if kind == "start":
            self.reset(event)
        elif kind == "history":
            samples = event.get("samples")
            if isinstance(samples, list | tuple):  # msgpack gives tuples
                self._history([s for s in samples if isinstance(s, Mapping)])
        elif kind == "progress":
            self._progress(event)
        elif kind in ("found", "confirmed", "layout"):
            if kind == "layout":
                self._best(event)
            self.counts[str(kind)] += 1
            self.recent.appendleft(
                {
                    "wall": _num(event.get("wall", time.time())),
                    "event": str(kind),
                    "fragment": str(event.get("fragment", "")),
                    "digest": str(event.get("digest", "")),
                }
            )
            self._changed()
        elif kind == "done":
            self.done = dict(event)
            self._changed()
        else:
            return
        self.events += 1
        self.updated = time.time()

    def _best(self, event: Mapping[str, object]) -> None:
        """A ranked μGraph's estimate against its reference's: the fragment's best speedup so far."""
        est, ref = _num(event.get("estimated_seconds")), _num(event.get("reference_seconds"))
        if est > 0 and ref > 0:
            name = str(event.get("fragment", ""))
            self.best[name] = max(self.best.get(name, 0.0), ref / est)

    def _changed(self, replaced: bool = False) -> None:
        self.version += 1
        if replaced:
            self.epoch += 1

    def _add_fragments(self, names: Iterable[str]) -> bool:
        new = [n for n in names if n not in self.fragments]
        self.fragments.extend(new)
        return bool(new)

    def _row(self, sample: Mapping[str, object], inv: float, window: deque[Row]) -> Row:
        wall = _num(sample.get("wall"))
        seconds = _num(sample.get("seconds"))
        row: Row = {"t": wall * 1000.0, "inv": inv, "seconds": seconds}
        for field, key in TOTALS.items():
            row[key] = _num(sample.get(field))
        per = sample.get("fragments")
        per = per if isinstance(per, Mapping) else {}
        for i, name in enumerate(self.fragments):
            values = per.get(name)
            if isinstance(values, Mapping):
                for field, suffix in PER_FRAGMENT.items():
                    row[f"f{i}_{suffix}"] = _num(values.get(field))
        # states/s over the last RATE_WINDOW seconds (from the oldest row of the window)
        while len(window) > 1 and wall - window[1]["_wall"] >= RATE_WINDOW:
            window.popleft()
        if window and wall > window[0]["_wall"]:
            base = window[0]
            dt = wall - base["_wall"]
            row["rate"] = (row["states"] - base["states"]) / dt
            for i in range(len(self.fragments)):
                k = f"f{i}_states"
                row[f"f{i}_rate"] = (row.get(k, math.nan) - base.get(k, math.nan)) / dt
        else:
            row["rate"] = math.nan
        window.append({**row, "_wall": wall})
        if not math.isnan(seconds):
            self.inv_seconds[inv] = max(self.inv_seconds.get(inv, 0.0), seconds)
        return row

    def _progress(self, event: Mapping[str, object]) -> None:
        per = event.get("fragments")
        replaced = isinstance(per, Mapping) and self._add_fragments(str(k) for k in per)
        inv = _num(event.get("invocation", self.start.get("invocation", 0)))
        if self.rows and self.rows[-1]["inv"] != inv:
            self._window.clear()
        row = self._row(event, inv, self._window)
        if math.isnan(row["t"]):
            return
        row["speedup_one"] = 1.0  # the reference's own line on the best-so-far plot
        for i, name in enumerate(self.fragments):
            row[f"f{i}_best"] = self.best.get(name, math.nan)
        if self.rows and (self.rows[-1]["inv"], self.rows[-1]["t"]) > (inv, row["t"]):
            self.rows.append(row)  # out of order (should not happen): sort them again
            self.rows.sort(key=lambda r: (r["inv"], r["t"]))
            replaced = True
        else:
            self.rows.append(row)
        self.latest = dict(event)
        workers = event.get("worker_busy_seconds")
        if isinstance(workers, Mapping):
            self.workers = {str(w): _num(s) for w, s in workers.items()}
        self._changed(replaced=self._thin() or replaced)

    def _history(self, samples: Sequence[Mapping[str, object]]) -> None:
        """Earlier invocations' progress samples, oldest first; each invocation's "seconds" starts at 0."""
        for s in samples:
            per = s.get("fragments")
            if isinstance(per, Mapping):
                self._add_fragments(str(k) for k in per)
        derived = -1e9  # invocation numbers for samples without one: below any real one, in order
        last_seconds = math.inf
        rows: list[Row] = []
        window: deque[Row] = deque()
        prev_inv: float | None = None
        for s in samples:
            seconds = _num(s.get("seconds"))
            if "invocation" in s:
                inv = _num(s.get("invocation"))
            else:
                if not seconds >= last_seconds:
                    derived += 1
                inv = derived
            last_seconds = seconds
            if inv != prev_inv:
                window = deque()
                prev_inv = inv
            row = self._row(s, inv, window)
            if not math.isnan(row["t"]):
                rows.append(row)
        invs = {r["inv"] for r in rows}
        self.rows = sorted([*rows, *(r for r in self.rows if r["inv"] not in invs)], key=lambda r: (r["inv"], r["t"]))
        self._thin()
        self._changed(replaced=True)

    def _thin(self) -> bool:
        if len(self.rows) <= MAX_ROWS:
            return False
        self.rows = [self.rows[0], *self.rows[1:-1][::2], self.rows[-1]]
        return True

    # -- what the page reads -----------------------------------------------------------------------
    def elapsed(self) -> float:
        """Search time of the whole run: the invocations' lengths added up (the gaps between them left out)."""
        return sum(self.inv_seconds.values())

    def columns(self, keys: Sequence[str], start: int = 0) -> Columns:
        """Columns "t" (ms since the epoch) and `keys` of rows[start:], with a NaN row between two
        invocations (so lines break across the downtime between them)."""
        out: dict[str, list[float]] = {k: [] for k in ("t", *keys)}
        prev = self.rows[start - 1] if start > 0 else None
        for r in self.rows[start:]:
            if prev is not None and prev["inv"] != r["inv"]:
                out["t"].append((prev["t"] + r["t"]) / 2)
                for k in keys:
                    out[k].append(math.nan)
            out["t"].append(r["t"])
            for k in keys:
                out[k].append(r.get(k, math.nan))
            prev = r
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}

    def fragment_tasks(self) -> dict[str, list[Any]]:
        """The newest per-fragment task counts: done, running and pending (the frontier)."""
        per = self.latest.get("fragments")
        per = per if isinstance(per, Mapping) else {}
        out: dict[str, list[Any]] = {"fragment": [], "done": [], "running": [], "pending": []}
        for name in self.fragments:
            values = per.get(name)
            values = values if isinstance(values, Mapping) else {}
            out["fragment"].append(name)
            for key, field in (("done", "tasks_done"), ("running", "tasks_running"), ("pending", "tasks_pending")):
                v = _num(values.get(field))
                out[key].append(0.0 if math.isnan(v) else v)
        return out

    def worker_busy(self) -> dict[str, list[Any]]:
        names = sorted(self.workers)
        return {
            "worker": names,
            "label": [n.removeprefix("tcp://") for n in names],
            "busy": [self.workers[n] for n in names],
        }

    def status(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        if not self.start and not self.rows:
            return "waiting for a run"
        if self.done is not None:
            resume = self.done.get("resume", "run the same command to resume")  # a fresh run: without it
            return "complete" if self.done.get("complete") else f"stopped ({resume})"
        quiet = now - self.updated
        if quiet > 30:
            return f"no news for {quiet:.0f} s (driver stopped?)"
        return "running"
