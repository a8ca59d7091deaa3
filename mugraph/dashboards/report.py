"""The end-of-run report: one self-contained HTML file (inline CSS and SVG, no scripts, nothing
fetched) that says what a run found and why it took what it took.

`report_data` reads everything from the run store (so a resumed run's report covers every
invocation); `render_report` turns it into HTML and embeds the same data as JSON, which is what
the tests compare with the store.
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
from typing import Any, TypedDict, cast

from mugraph.dashboards.experts import expert_labels, expert_note
from mugraph.dashboards.summary import (
    COUNTER_MEANINGS,
    Headline,
    SizeRecord,
    best_so_far,
    headline,
    rows_to_show,
    size_line,
    size_record,
)
from mugraph.dashboards.svg_charts import bar_chart, line_chart
from mugraph.dashboards.svg_graph import draw_mugraph
from mugraph.ir.errors import MugraphError
from mugraph.ir.serialize import loads
from mugraph.stages.layout.costs import Layouts, LayoutsJSON
from mugraph.stages.layout.describe import describe_layouts, seconds_text
from mugraph.stages.layout.rows import RankedRow, ranked_rows
from mugraph.storage.memo.url import redact_url
from mugraph.storage.run.paths import RunPaths
from mugraph.storage.run.protocol import RunStoreReader
from mugraph.storage.run.run_records import FinalRecord, ProgressSample
from mugraph.storage.run.store import RunStore

SECTIONS = ("answer", "configuration", "fragments", "timeline", "workers", "ranking", "mugraphs", "counters")
RANKING_ROWS = 25
CHART_WIDTH = 1050  # the page's text width: charts span it
DATA_ID = "mugraph-report-data"


class TimelineSample(ProgressSample):
    """A stored progress sample on the whole run's time axis (see `_timeline`)."""

    elapsed: float
    states_per_s_now: float | None


class FragmentSummary(TypedDict):
    name: str
    preset: str | None
    digest: str
    sources: Any  # the fragment plan's JSON, as stored
    outputs: Any
    tasks_done: int
    tasks_pending: int
    found: int
    confirmed: int
    layouts: int
    best: str | None
    best_is_reference: bool


class ChosenGraph(TypedDict):
    digest: str
    graph: str  # ir.serialize JSON
    layouts: LayoutsJSON | None


class TaskCounts(TypedDict):
    total: int
    done: int
    pending: int


class WorkerBusy(TypedDict):
    busy_seconds: float
    tasks: int


class RunMeta(TypedDict, total=False):
    """What a run store's free-form meta holds when `optimize` made it: the command line and the
    versions of the packages that ran it."""

    command: list[str]
    versions: dict[str, str]


def _redacted(meta: Mapping[str, Any]) -> RunMeta:
    """The store's meta with any password or memo secret in its command line replaced by `***` (a
    store written before the command line was redacted may hold one)."""
    out = dict(meta)
    if isinstance(out.get("command"), list):
        out["command"] = [redact_url(str(a)) for a in out["command"]]
    return cast(RunMeta, out)


class ReportData(TypedDict):
    """Everything the report shows, as `report_data` reads it from the store; embedded in the page as
    JSON (so `read_report_data` gives it back with tuples as lists)."""

    store: str
    identity: dict[str, str]  # the run's identity record
    meta: RunMeta
    final: FinalRecord | None
    tasks: TaskCounts
    counters: dict[str, float]
    fragments: list[FragmentSummary]
    timeline: list[TimelineSample]
    restarts: list[float]
    size: SizeRecord | None
    invocations: int
    workers: dict[str, WorkerBusy]
    best_so_far: dict[str, list[tuple[float, float]]]
    experts: dict[str, str]
    expert_notes: dict[str, str]
    ranking: dict[str, list[RankedRow]]
    headlines: dict[str, Headline | None]
    chosen: dict[str, ChosenGraph]
    generated: str


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
    experts = expert_labels(store.identity, frags)
    found_order: dict[str, list[str]] = {}
    found_at: dict[str, dict[str, float]] = {}  # run seconds of each find, where the store kept them
    for i, f in enumerate(frags):
        conf = store.confirmations(i)
        found = store.found(i)
        ranking = ranked_rows(store.ranking(i) or [])
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
    return {
        "store": str(store.path),
        "identity": store.identity,
        "meta": _redacted(store.meta),
        "final": store.final(),
        "tasks": {
            "total": summary.get("tasks", 0),
            "done": summary.get("done", 0),
            "pending": summary.get("pending", 0),
        },
        "counters": summary.get("counters", {}),
        "fragments": fragments,
        "timeline": samples,
        "restarts": restarts,
        "size": size_record(samples, bool((last := store.final()) is not None and last.get("complete"))),
        "invocations": len(invocations),
        "workers": {w: {"busy_seconds": round(busy[w], 3), "tasks": done_per_worker[w]} for w in sorted(busy)},
        "best_so_far": {
            name: best_so_far(samples, name, found_order[name], rows, found_at[name]) for name, rows in rankings.items()
        },
        "experts": experts,
        "expert_notes": {name: expert_note(experts, rows) for name, rows in rankings.items()},
        "ranking": rankings,
        "headlines": {name: headline(rows) for name, rows in rankings.items()},
        "chosen": chosen,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f6f6f6} td.l,th.l{text-align:left} code{font-size:12px}
figure.chart{margin:12px 0} figcaption{font-weight:600;margin-bottom:4px}
svg text{font:11px system-ui,sans-serif;fill:#333} svg .grid{stroke:#eee} svg .axis{stroke:#999}
svg .marker{stroke:#d62728;stroke-dasharray:4 3} svg .gtitle{font-weight:600;font-size:12px}
svg .detail{fill:#666;font-size:10px} .graphs svg{display:block;margin:8px 0;border:1px solid #eee}
.empty{color:#999} .note{color:#666;font-size:12px} pre{background:#f8f8f8;padding:8px;overflow:auto}
figure.chart svg{width:100%;height:auto} tr.ref td{font-weight:600;background:#fffbe6}
.answer{border:1px solid #cfe0f5;background:#f5f9ff;border-radius:6px;padding:10px 14px;margin:10px 0}
.answer .big{font-size:17px;font-weight:600} .answer .why{color:#444}
"""


def _table(head: list[str], rows: list[list[Any]], left: int = 1, marked: list[bool] | None = None) -> str:
    """A table; rows whose `marked` flag is set get class "ref" (the reference program's row)."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(head))
    flags = marked or [False] * len(rows)

    def cells(r: list[Any]) -> str:
        return "".join(f'<td class="{"l" if i < left else ""}">{html.escape(str(c))}</td>' for i, c in enumerate(r))

    body = "".join(
        ('<tr class="ref">' if flag else "<tr>") + cells(r) + "</tr>" for r, flag in zip(rows, flags, strict=True)
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _section(key: str, title: str, body: str) -> str:
    return f'<section id="{key}"><h2>{html.escape(title)}</h2>{body}</section>'


def _answer(data: ReportData) -> str:
    """Per fragment: the headline, best and reference side by side, the model's reason, and ties."""
    out = []
    for name, h in (data.get("headlines") or {}).items():
        if h is None:
            out.append(f'<div class="answer"><div class="big">{html.escape(name)}: no ranking yet</div></div>')
            continue
        rows = [
            [
                "best" + (" (the reference)" if h["best_is_reference"] else f" {h['best'][:16]}"),
                seconds_text(h["seconds"]),
                f"{h['speedup']:.2f}x",
                h["kernels"],
                f"{h['dram_bytes']:,}",
            ],
            [
                f"reference (rank {h['reference_rank']} of {h['ranked']})",
                seconds_text(h["reference_seconds"]),
                "1.00x",
                h["reference_kernels"],
                f"{h['reference_dram_bytes']:,}",
            ],
        ]
        why = f'<p class="why">Why: {html.escape(h["why"])}</p>' if h["why"] else ""
        ties = f'<p class="note">{html.escape(h["tie_note"])}</p>' if h["tie_note"] else ""
        note = (data.get("expert_notes") or {}).get(name)
        ties += f'<p class="note">{html.escape(note)}</p>' if note else ""
        out.append(
            f'<div class="answer"><div class="big">{html.escape(name)}: {html.escape(h["line"])}</div>'
            + _table(["", f"time ({h['timing']})", "speedup", "kernels", "DRAM bytes"], rows, 1, [False, True])
            + why
            + ties
            + "</div>"
        )
    size = f'<p class="size">{html.escape(size_line(data.get("size")))}</p>'
    return ("".join(out) or '<p class="empty">no result yet</p>') + size


def render_report(data: ReportData) -> str:
    ident, final = data["identity"], data["final"]
    state = "complete" if final is not None and final.get("complete") else "not complete (best so far)"
    parts = [
        f"<h1>mugraph run: {html.escape(str(ident.get('program')))}</h1>",
        f"<p>{html.escape(data['store'])} · {html.escape(state)} · {data['invocations']} invocation(s) · "
        f"report generated {html.escape(data['generated'])}</p>",
    ]
    parts.append(_section("answer", "Answer", _answer(data)))
    conf_rows: list[list[Any]] = [[k, v] for k, v in sorted(ident.items())]
    meta = data.get("meta") or {}
    conf_rows += [["command", " ".join(map(str, meta.get("command", [])))]]
    conf_rows += [[f"version {k}", v] for k, v in sorted((meta.get("versions") or {}).items())]
    if final:
        conf_rows += [
            ["best", final.get("best")],
            ["GPU profile", final.get("gpu_profile", "-")],
            ["end-to-end max rel err (float64)", f"{final.get('end_to_end_max_rel_err', float('nan')):.2e}"],
        ]
    parts.append(_section("configuration", "Configuration and digests", _table(["field", "value"], conf_rows, 2)))
    frag_rows = [
        [
            f["name"],
            f["preset"],
            f["digest"][:16],
            f["tasks_done"],
            f["tasks_pending"],
            f["found"],
            f["confirmed"],
            f["layouts"],
            "reference" if f["best_is_reference"] else (f["best"] or "-")[:16],
        ]
        for f in data["fragments"]
    ]
    parts.append(
        _section(
            "fragments",
            "Fragments",
            _table(
                ["fragment", "preset", "digest", "tasks done", "pending", "found", "confirmed", "layouts", "chosen"],
                frag_rows,
                3,
            ),
        )
    )
    tl, marks = data["timeline"], data["restarts"]
    names = [f["name"] for f in data["fragments"]]

    by_key: Sequence[Mapping[str, Any]] = tl  # series are named by their key

    def series(key: str) -> list[tuple[float, float]]:
        return [(s["elapsed"], float(s[key])) for s in by_key if s.get(key) is not None]

    states = {
        n: [(s["elapsed"], float(s["fragments"][n]["states"])) for s in tl if n in s.get("fragments", {})]
        for n in names
    }
    rate = {"states/s": series("states_per_s_now")}
    memo = {"shared memo (Redis)": [(x, 100 * y) for x, y in series("memo_remote_hit_rate")]}
    local = [(x, 100 * y) for x, y in series("memo_local_hit_rate")]
    if any(y > 0 for _, y in local):  # each oracle settles a term once, so the in-process LRU seldom hits
        memo["in-process LRU"] = local
    found = {"found": series("mugraphs"), "confirmed": series("confirmed")}
    span = (0.0, max((s["elapsed"] for s in tl), default=1.0))

    def chart(title: str, data: dict[str, list[tuple[float, float]]], y_label: str, chart_id: str) -> str:
        return line_chart(
            title,
            data,
            x_label="run time (s)",
            y_label=y_label,
            markers=marks,
            x_range=span,
            chart_id=chart_id,
            width=CHART_WIDTH,
        )

    charts = [
        chart("States explored, per fragment", states, "states", "chart-states"),
        chart("States per second", rate, "states/s", "chart-rate"),
        chart("Memo hit rate: oracle queries answered by the memo", memo, "% of lookups", "chart-memo"),
        chart("Solver calls", {"solver calls": series("solver_calls")}, "calls", "chart-solver"),
        chart("μGraphs found and confirmed", found, "μGraphs", "chart-found"),
        chart(
            "Best speedup over the reference so far, per fragment (final ranking's estimates, at each "
            "μGraph's find time)",
            data.get("best_so_far") or {},
            "speedup (x)",
            "chart-best",
        ),
        chart(
            "Size of the space: estimated (Knuth probes) and explored",
            {"estimated states": series("estimated_states"), "explored states": series("states")},
            "states",
            "chart-size",
        ),
    ]
    note = (
        '<p class="note">Run time adds up the invocations and leaves out the gaps between them; dashed red '
        "lines mark where a resumed invocation began.</p>"
    )
    parts.append(_section("timeline", "Timeline", note + "".join(charts)))
    workers = data["workers"]
    mean = sum(w["busy_seconds"] for w in workers.values()) / len(workers) if workers else 0.0
    imbalance = (max(w["busy_seconds"] for w in workers.values()) / mean) if workers and mean > 0 else None
    parts.append(
        _section(
            "workers",
            "Per-worker busy time (search tasks, whole run)",
            bar_chart(
                "Seconds inside search tasks",
                {w: v["busy_seconds"] for w, v in workers.items()},
                unit="s",
                chart_id="chart-workers",
                width=CHART_WIDTH,
            )
            + _table(["worker", "busy s", "tasks"], [[w, v["busy_seconds"], v["tasks"]] for w, v in workers.items()])
            + (f"<p>max/mean busy time: {imbalance:.2f}</p>" if imbalance else ""),
        )
    )
    rank_parts = []
    for name, rows in data["ranking"].items():
        shown = rows_to_show(rows, RANKING_ROWS)
        profile = rows[0].get("profile", "-") if rows else "-"
        labels = data.get("experts") or {}
        body = [
            [
                n,
                "reference"
                if r.get("reference")
                else r["digest"][:16] + (f" (expert {labels[r['digest']]})" if r["digest"] in labels else ""),
                r["kernels"],
                f"{r['dram_bytes']:,}",
                f"{r.get('flops', 0):,}",
                seconds_text(r["estimated_seconds"]),
                f"{r['speedup']:.2f}x",
                r.get("bound", "-"),
                "yes" if r.get("fits", True) else "NO",
                f"{r.get('layout_cost', 0):,}",
            ]
            for n, r in shown
        ]
        hidden = len(rows) - len(shown)
        more = (
            (
                f'<p class="note">{hidden} more rows in the store (`mugraph show --all` lists them); the reference '
                "row is always shown.</p>"
            )
            if hidden
            else ""
        )
        is_ref = [bool(r.get("reference")) for _, r in shown]
        rank_parts.append(
            f"<h3>{html.escape(name)} on {html.escape(str(profile))} ({len(rows)} ranked)</h3>"
            + _table(
                [
                    "#",
                    "μGraph",
                    "kernels",
                    "DRAM bytes",
                    "FLOPs",
                    "est. time",
                    "speedup",
                    "bound",
                    "fits",
                    "layout cost",
                ],
                body,
                2,
                is_ref,
            )
            + more
        )
    parts.append(
        _section(
            "ranking",
            "Ranking (emitted kernels' estimated time; speedup over the reference)",
            "".join(rank_parts) or '<p class="empty">no ranking yet</p>',
        )
    )
    graphs = []
    for name, c in data["chosen"].items():
        g, lay_json = loads(c["graph"]), c.get("layouts")
        lay = (
            "".join(
                f"<div><code>{html.escape(line)}</code></div>"
                for line in describe_layouts(g, Layouts.from_json(lay_json))
            )
            if lay_json
            else ""
        )
        graphs.append(
            f"<h3>{html.escape(name)}: {html.escape(c['digest'][:16])}</h3>"
            + draw_mugraph(g, name)
            + (f"<p>Layouts (shape:innermost dim~swizzled dim):</p>{lay}" if lay else "")
        )
    parts.append(_section("mugraphs", "Chosen μGraphs", "".join(graphs) or '<p class="empty">none yet</p>'))
    counters = [
        [
            k,
            COUNTER_MEANINGS.get(k, ""),
            f"{v:,.3f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):,}",
        ]
        for k, v in sorted(data["counters"].items())
    ]
    tasks = data["tasks"]
    parts.append(
        _section(
            "counters",
            "Counters (sums over done search tasks)",
            f"<p>tasks: {tasks['done']:,} done, {tasks['pending']:,} pending</p>"
            + _table(["counter", "what it counts", "value"], counters, 2),
        )
    )
    blob = json.dumps(data, default=str).replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>mugraph report: {html.escape(str(ident.get('program')))}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(parts)}"
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
    with RunStore.open_existing(store_path, readonly=True) as st:
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
