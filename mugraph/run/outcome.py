"""What a run got, for `mugraph.optimize` and `mugraph.load`: a finished store read back as the run's
`done` summary without starting a cluster (so optimising the same model at the same shapes again costs
a capture, not a search), the verdict record the returned module carries, and the console text, on
stderr, that `mugraph optimize` prints too."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mugraph.dashboards.console import (
    chosen_row,
    kept_reason,
    limit_line,
    measured_line,
    memo_lost_line,
    progress_text,
    reused_line,
    start_line,
    verdict_lines,
    workers_line,
)
from mugraph.dashboards.progress_line import ProgressLine
from mugraph.dashboards.report import write_report
from mugraph.ir.errors import MugraphError
from mugraph.ir.together import outside_words
from mugraph.pipeline.records import MEMO_KEYS
from mugraph.storage.run.backends import open_existing
from mugraph.storage.run.paths import RunPaths

if TYPE_CHECKING:
    from mugraph.pipeline.events import DoneEvent
    from mugraph.torch.verdict import Verdict


def stored_done(store: Path, t0: float | None = None, *, write_missing_report: bool = True) -> DoneEvent:
    """The `done` summary of the result a store holds (its final record and rankings), as this
    invocation's: nothing run, nothing measured. The report is the one beside the store, written again
    where it is missing if `write_missing_report` (else None)."""
    t0 = time.perf_counter() if t0 is None else t0
    with open_existing(store, readonly=True) as st:
        final = st.final()
        if final is None:
            raise MugraphError(f"{store}: no result yet; run `mugraph optimize` on it first")
        names = [f["name"] for f in st.fragments()]
        orders = [list(st.ranking(i) or []) for i in range(len(names))]
        summary = st.task_summary()
        program = str(st.identity.get("program", "model"))
        size = st.size_bytes()
    ranked = [(n, o) for n, o in zip(names, orders, strict=True) if any(r.get("reference") for r in o)]
    rankings = {n: [r for r in o if not r.get("reference")] for n, o in ranked}
    references = {n: next(r for r in o if r.get("reference")) for n, o in ranked}
    best = final["best_per_fragment"]
    counters = summary.get("counters", {})
    done: dict[str, Any] = {
        "event": "done",
        "store": str(store),
        "program": program,
        "complete": final["complete"],
        "mugraphs": list(final["mugraphs"]),
        "best": final["best"],
        "best_per_fragment": dict(best),
        "ranking": rankings,
        "reference": references,
        "gpu_profile": final["gpu_profile"],
        "measured": dict(final.get("measured", {})),
        "not_confident": sorted(
            n
            for n, r in rankings.items()
            if r
            and best[n] == references[n]["digest"]
            and r[0]["estimated_seconds"] < references[n]["estimated_seconds"]
        ),
        "io_layouts": {},
        "no_layout": {},
        "end_to_end_max_rel_err": final["end_to_end_max_rel_err"],
        "tasks_run": 0,
        "confirms_run": 0,
        "layouts_run": 0,
        "tasks_done": int(summary.get("done", 0)),
        "tasks_pending": int(summary.get("pending", 0)),
        "states": int(counters.get("nodes", 0)),
        "solver_calls": int(counters.get("solver_calls", 0)),
        "memo": dict.fromkeys(MEMO_KEYS, 0),  # the same fields as a run's: nothing asked this time
        "worker_busy_seconds": {},
        "worker_peak_rss_mib": {},
        "driver_peak_rss_mib": 0.0,
        "store_bytes": size,
        "seconds": round(time.perf_counter() - t0, 3),
        "profile": None,
        "report": _report(store, write_missing_report),
        "kernels": None,
        "kernels_note": None,
        "kernels_check": None,
        "expert": None,
    }
    if final["complete"]:
        done["resume"] = None  # else the reader's own advice: this store does not say what made it
    return done  # type: ignore[return-value]


def _report(store: Path, write_missing: bool) -> str | None:
    """The report beside the store, written again where it is missing if `write_missing` and the
    directory can be written (a finished store on a read-only mount is still read back); else None."""
    report = RunPaths(store).report
    if report.is_file():
        return str(report)
    if not write_missing:
        return None
    try:
        return str(write_report(store))
    except OSError:
        return None


def finished(
    store: Path, identity: Mapping[str, str], gpu_profile: str, model: str, split: Sequence[tuple[str, str]]
) -> bool:
    """True where `store` holds a complete result for this identity and the fragments of `split` (name, digest),
    ranked for this GPU profile by this cost model and for the default (row-major) strides: the same call
    without `--layout` would search and rank nothing again (a store ranked by an earlier model is ranked
    again by the run). A store whose fragments are others (another version split the program into other
    graphs: their search spaces differ) is not reused: the run says so when it opens it."""
    if not store.is_dir():
        return False
    try:
        with open_existing(store, readonly=True) as st:
            final = st.final()
            records = st.fragments()
            fragments = range(len(records))
            return (
                dict(st.identity) == dict(identity)
                and [(f["name"], f["digest"]) for f in records] == list(split)
                and final is not None
                and bool(final["complete"])
                and final.get("gpu_profile") == gpu_profile
                and not st.task_summary().get("pending", 0)
                and not any(rec.get("io_layouts") for i in fragments for rec in st.layouts(i).values())
                and all(row.get("model") == model for i in fragments for row in st.ranking(i) or [])
            )
    except (MugraphError, OSError, KeyError):
        return False  # the run opens it and says what is wrong


def _reference_seconds(done: Mapping[str, Any], name: str) -> float | None:
    """The fragment's reference's estimated seconds, from its row in the `done` event."""
    row = (done.get("reference") or {}).get(name)
    return None if not row or row.get("estimated_seconds") is None else float(row["estimated_seconds"])


def verdict_of(
    done: Mapping[str, Any], heavy_glue: tuple[str, ...], reused: bool, glue: tuple[str, ...] | None = None
) -> Verdict:
    """The verdict record of a run's `done` summary; `glue` names every op PyTorch runs as written."""
    from mugraph.torch.verdict import FragmentVerdict, Verdict

    fragments = []
    for name, ranking in done["ranking"].items():
        row = chosen_row(done, name)
        fragments.append(
            FragmentVerdict(
                name=name,
                chosen="reference" if row.get("reference") else str(row["digest"]),
                speedup=float(row["speedup"]),
                kernels=int(row["kernels"]),
                estimated_seconds=float(row["estimated_seconds"]),
                ranked=len(ranking),
                reason=kept_reason(done, name),
                reference_estimate=_reference_seconds(done, name),
            )
        )
    return Verdict(
        program=str(done["program"]),
        complete=bool(done["complete"]),
        reused=reused,
        fragments=tuple(fragments),
        heavy_glue=heavy_glue,
        glue=glue,
        store=str(done["store"]),
        report=done.get("report"),
        gpu_profile=str(done["gpu_profile"]),
        resume=done.get("resume"),
    )


class Console:
    """The run's text on stderr (what `mugraph optimize` prints), or nothing where `verbose` is off.
    stderr is looked up at each write, so a redirected sys.stderr gets it."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self._progress: ProgressLine | None = None
        self._limit_said = False  # the progress line stops at the time limit's line (the search has stopped)

    def _line(self, text: str) -> None:
        if self.verbose:
            self.close()
            print(text, file=sys.stderr, flush=True)

    def event(self, e: Mapping[str, Any]) -> None:
        if not self.verbose:
            return
        if e["event"] == "progress":
            if self._limit_said:
                return
            if self._progress is None:
                self._progress = ProgressLine(sys.stderr)
            self._progress.update(progress_text(e))
        elif e["event"] == "measured":
            self._line(measured_line(e))
        elif e["event"] == "start":
            self._line(start_line(e))
        elif e["event"] == "limit":
            self._limit_said = True
            self._line(limit_line(e))
        elif e["event"] == "workers":
            self._line(workers_line(e))
        elif e["event"] == "memo_lost":
            self._line(memo_lost_line(e))

    def reused(self, done: Mapping[str, Any]) -> None:
        self._line(reused_line(done["program"], done["store"], len(done["ranking"]), done["tasks_done"]))

    def finished_anyway(self, done: Mapping[str, Any]) -> None:
        """An interrupt that came once the run had stored its whole result (closing its cluster,
        writing its report): the result stands, read back from the store."""
        self._line(f"mugraph: interrupted after the run finished; its result is complete in {done['store']}")

    def verdict(self, done: Mapping[str, Any], verdict: Verdict) -> None:
        # what no fragment holds, as the verdict's own fragments-together line names it
        for line in verdict_lines(done, verdict.gpu_profile, outside_words(verdict.glue, (), from_torch=True)):
            self._line(line)
        for note in verdict.notes():
            self._line(f"  note: {note}")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
