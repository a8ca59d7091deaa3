"""The end-of-run report: one self-contained HTML file (inline CSS and SVG, no scripts, nothing
fetched) that says what a run found and why it took what it took.

`report_data` reads everything from the run store (so a resumed run's report covers every
invocation) into the records of `report_records`; `render_report` puts `report_html`'s sections in
order and embeds the same data as JSON, which is what the tests compare with the store.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from mugraph.dashboards import report_html
from mugraph.dashboards.experts import expert_labels, expert_marks, expert_note
from mugraph.dashboards.provisional import stored_or_provisional
from mugraph.dashboards.report_html import CHART_WIDTH as CHART_WIDTH
from mugraph.dashboards.report_records import ChosenGraph as ChosenGraph
from mugraph.dashboards.report_records import FragmentSummary as FragmentSummary
from mugraph.dashboards.report_records import ReportData as ReportData
from mugraph.dashboards.report_records import RunMeta as RunMeta
from mugraph.dashboards.report_records import TaskCounts as TaskCounts
from mugraph.dashboards.report_records import TimelineSample as TimelineSample
from mugraph.dashboards.report_records import WorkerBusy as WorkerBusy
from mugraph.dashboards.summary import best_so_far, headline, size_record
from mugraph.ir.errors import MugraphError
from mugraph.stages.layout.profiles import DEFAULT_PROFILE, get_profile
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.memo.url import redact_url
from mugraph.storage.run.backends import open_existing
from mugraph.storage.run.paths import RunPaths
from mugraph.storage.run.protocol import RunStoreReader
from mugraph.storage.run.run_records import ProgressSample

SECTIONS = ("answer", "configuration", "fragments", "timeline", "workers", "ranking", "mugraphs", "counters")
RANKING_ROWS = 25
DATA_ID = "mugraph-report-data"

# How every report begins (its title): a file at a report's path is replaced only where it has it.
REPORT_MARK = "<title>mugraph report"


def _redacted(meta: Mapping[str, Any]) -> RunMeta:
    """The store's meta with any password or memo secret in its command line replaced by `***` (a
    store written before the command line was redacted may hold one)."""
    out = dict(meta)
    if isinstance(out.get("command"), list):
        out["command"] = [redact_url(str(a)) for a in out["command"]]
    return cast(RunMeta, out)


def report_path(store: Path) -> Path:
    """Where `optimize` writes the report: beside the store, `NAME.zarr` → `NAME.report.html`."""
    return RunPaths(store).report


def _timeline(invocations: Sequence[Sequence[ProgressSample]]) -> tuple[list[TimelineSample], list[float]]:
    """Samples with `elapsed`: run time summed over invocations (gaps between them left out), and the
    elapsed time at which each later invocation started. `states_per_s_now` is the rate over a window
    of about a fortieth of the run (2 to 30 s), so batches of finishing tasks do not make it jagged."""
    out: list[TimelineSample] = []
    starts: list[float] = []
    offset = 0.0
    span = sum(float(inv[-1]["seconds"]) for inv in invocations if inv)
    window = min(30.0, max(2.0, span / 40))
    for n, inv in enumerate(invocations):
        if not inv:
            continue
        if n and out:
            starts.append(offset)
        first = 0
        for i, s in enumerate(inv):
            now = float(s["seconds"])
            while float(inv[first]["seconds"]) < now - window:
                first += 1
            back = inv[first] if first < i else (inv[i - 1] if i else None)
            dt = now - float(back["seconds"]) if back is not None else 0.0
            rate = (s["states"] - back["states"]) / dt if back is not None and dt > 0 else None
            out.append({**s, "elapsed": round(offset + now, 3), "invocation": n, "states_per_s_now": rate})
        offset += float(inv[-1]["seconds"])
    return out, starts


def report_data(store: RunStoreReader) -> ReportData:
    summary = store.task_summary()
    frags = store.fragments()
    tasks = store.tasks()
    busy: dict[str, float] = defaultdict(float)
    done_per_worker: dict[str, int] = defaultdict(int)
    for t in tasks:
        if t.done:
            busy[t.worker] += float(t.counters.get("seconds", 0.0))
            done_per_worker[t.worker] += 1
    invocations = store.timeline()
    samples, restarts = _timeline(invocations)
    fragments: list[FragmentSummary] = []
    chosen: dict[str, ChosenGraph] = {}
    rankings: dict[str, list[RankedRow]] = {}
    experts = expert_labels(store.identity, frags, store.experts())
    found_order: dict[str, list[str]] = {}
    found_at: dict[str, dict[str, float]] = {}  # run seconds of each find, where the store kept them
    provisional: list[str] = []
    final = store.final()
    profile = get_profile(str(final.get("gpu_profile") or DEFAULT_PROFILE) if final else DEFAULT_PROFILE)
    running = store.writer() is not None
    for i, f in enumerate(frags):
        conf = store.confirmations(i)
        found = store.found(i)
        ranking, so_far = stored_or_provisional(store, i, profile, running)
        if so_far and ranking:
            provisional.append(f["name"])
        per = summary.get("fragments", {}).get(i, {"done": 0, "pending": 0})
        best = ranking[0] if ranking else None
        fragments.append(
            {
                "name": f["name"],
                "preset": f.get("preset"),
                "digest": f["digest"],
                "sources": f.get("sources"),
                "outputs": f.get("outputs"),
                "tasks_done": per["done"],
                "tasks_pending": per["pending"],
                "found": len(found),
                "confirmed": sum(1 for r in conf.values() if r["equivalent"]),
                "layouts": len(store.layouts(i)),
                "best": best["digest"] if best else None,
                "best_is_reference": bool(best and best.get("reference")),
            }
        )
        rankings[f["name"]] = ranking
        found_order[f["name"]] = [r.digest for r in sorted(found.values(), key=lambda r: (r.task, r.path))]
        found_at[f["name"]] = {d: r.seconds for d, r in found.items() if r.seconds is not None}
        if best is not None:
            graph = f["graph"] if best.get("reference") else found[best["digest"]].graph
            chosen[f["name"]] = {"digest": best["digest"], "graph": graph, "layouts": best.get("layouts")}
            head = headline(ranking)
            runner = head["runner_up"] if head is not None else None
            if runner in found:  # the reference was kept: draw the μGraph that came closest too
                row = next(r for r in ranking if r["digest"] == runner)
                chosen[f"{f['name']} (fastest μGraph, not chosen)"] = {
                    "digest": runner,
                    "graph": found[runner].graph,
                    "layouts": row.get("layouts"),
                }
    complete = bool(final is not None and final.get("complete"))
    return {
        "store": str(store.path),
        "identity": store.identity,
        "meta": _redacted(store.meta),
        "final": final,
        "tasks": {
            "total": summary.get("tasks", 0),
            "done": summary.get("done", 0),
            "pending": summary.get("pending", 0),
        },
        "counters": summary.get("counters", {}),
        "fragments": fragments,
        "timeline": samples,
        "restarts": restarts,
        "size": size_record(
            samples,
            complete,
            int(summary.get("counters", {}).get("nodes", 0)),
        ),
        "invocations": len(invocations),
        "workers": {w: {"busy_seconds": round(busy[w], 3), "tasks": done_per_worker[w]} for w in sorted(busy)},
        "best_so_far": {
            name: best_so_far(samples, name, found_order[name], rows, found_at[name]) for name, rows in rankings.items()
        },
        "experts": expert_marks(experts),
        "expert_notes": {name: expert_note(experts, rows, complete) for name, rows in rankings.items()},
        "ranking": rankings,
        "provisional": provisional,
        "headlines": {name: headline(rows) for name, rows in rankings.items()},
        "chosen": chosen,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def render_report(data: ReportData) -> str:
    """The whole page: its sections in SECTIONS' order, then the data as JSON for tools to read back."""
    sections = [
        report_html.section("answer", "Answer", report_html.answer(data)),
        report_html.section("configuration", "Configuration and digests", report_html.configuration(data)),
        report_html.section("fragments", "Fragments", report_html.fragments(data)),
        report_html.section("timeline", "Timeline", report_html.timeline(data)),
        report_html.section("workers", "Per-worker busy time (search tasks, whole run)", report_html.workers(data)),
        report_html.section(
            "ranking",
            "Ranking (emitted kernels' estimated time; speedup over the reference)",
            report_html.ranking(data, RANKING_ROWS),
        ),
        report_html.section("mugraphs", "Chosen μGraphs", report_html.mugraphs(data)),
        report_html.section("counters", "Counters (sums over done search tasks)", report_html.counters(data)),
    ]
    blob = json.dumps(data, default=str).replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"{REPORT_MARK}: {html.escape(str(data['identity'].get('program')))}</title>"
        f"<style>{report_html.CSS}</style></head>"
        f"<body>{report_html.heading(data)}{''.join(sections)}"
        f'<script type="application/json" id="{DATA_ID}">{blob}</script></body></html>'
    )


def read_report_data(html_text: str) -> ReportData:
    """The data a report embeds (what tools and tests compare with the store)."""
    start = html_text.find(f'id="{DATA_ID}">')
    if start < 0:
        raise MugraphError("not a mugraph report: it embeds no report data")
    blob = html_text[start + len(DATA_ID) + 6 :].split("</script>", 1)[0]
    return cast(ReportData, json.loads(blob.replace("<\\/", "</")))


def write_report(store_path: Path, out: Path | None = None) -> Path:
    """Read the store (read-only, beside a running writer if need be) and write its report."""
    if not store_path.exists():
        raise MugraphError(f"{store_path}: no such run store")
    with open_existing(store_path, readonly=True) as st:
        data = report_data(st)
    target = out or report_path(store_path)
    _write_new(target, render_report(data).encode("utf-8"))
    return target


def _write_new(target: Path, data: bytes) -> None:
    """Write `target` whole: into a temp file of a fresh name beside it, created exclusively (never
    through a link planted under a name the report is known to use, which would clobber the link's
    target), then renamed over it."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise
