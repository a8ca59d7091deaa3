"""The report's HTML, one function per section of the page (`report.render_report` puts them in
order): each reads the report data and returns its section's body, escaped, with inline SVG charts."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mugraph.dashboards.report_records import ReportData
from mugraph.dashboards.summary import COUNTER_MEANINGS, rows_to_show, size_line, stored_together
from mugraph.dashboards.svg_charts import bar_chart, line_chart
from mugraph.dashboards.svg_graph import draw_mugraph
from mugraph.ir.serialize import loads
from mugraph.ir.together import speedup_text
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.describe import describe_layouts, seconds_text
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.recorded_command import made_from_python, python_call, resuming_command

CHART_WIDTH = 1050  # the page's text width: charts span it
Series = dict[str, list[tuple[float, float]]]

CSS = """
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


def table(head: list[str], rows: list[list[Any]], left: int = 1, marked: list[bool] | None = None) -> str:
    """A table; rows whose `marked` flag is set get class "ref" (the reference program's row)."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(h)}</th>' for i, h in enumerate(head))
    flags = marked or [False] * len(rows)

    def cells(r: list[Any]) -> str:
        return "".join(f'<td class="{"l" if i < left else ""}">{html.escape(str(c))}</td>' for i, c in enumerate(r))

    body = "".join(
        ('<tr class="ref">' if flag else "<tr>") + cells(r) + "</tr>" for r, flag in zip(rows, flags, strict=True)
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def section(key: str, title: str, body: str) -> str:
    """One section of the page: its anchor, its heading, its body."""
    return f'<section id="{key}"><h2>{html.escape(title)}</h2>{body}</section>'


PROVISIONAL = (
    "Provisional: the run has not ended (it is running, or stopped before its end); this ranks the "
    "μGraphs confirmed and laid out so far, as its end would. "
)


def finish_advice(data: ReportData) -> str:
    """How the stopped run is finished: the command recorded in its store (without `--fresh`, which
    would delete what it did), or the `mugraph.optimize` call for a store made from Python."""
    store = Path(data["store"])
    command = resuming_command(data["meta"], store)
    if command is not None:
        return f"Finish it with `{command}`."
    if made_from_python(data["meta"]):
        return f"Finish it with {python_call(store, data['meta'])}."
    return "Run the command that made it again, without --fresh, to finish it."


def answer(data: ReportData) -> str:
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
                speedup_text(h["speedup"]),
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
        if name in (data.get("provisional") or []):
            ties += f'<p class="note">{html.escape(PROVISIONAL + finish_advice(data))}</p>'
        out.append(
            f'<div class="answer"><div class="big">{html.escape(name)}: {html.escape(h["line"])}</div>'
            + table(["", f"time ({h['timing']})", "speedup", "kernels", "DRAM bytes"], rows, 1, [False, True])
            + why
            + ties
            + "</div>"
        )
    figure = stored_together(data["final"], data.get("ranking") or {}, "model_digest" in data["identity"])
    if figure is not None:  # what the fragments' speedups come to (one fragment's is its own)
        out.append(f'<div class="answer together"><div class="big">{html.escape(figure)}</div></div>')
    size = f'<p class="size">{html.escape(size_line(data.get("size")))}</p>'
    return ("".join(out) or '<p class="empty">no result yet</p>') + size


def heading(data: ReportData) -> str:
    """The page's title line and the line under it: the store, whether the run is complete, when."""
    final = data["final"]
    state = "complete" if final is not None and final.get("complete") else "not complete (best so far)"
    return (
        f"<h1>mugraph run: {html.escape(str(data['identity'].get('program')))}</h1>"
        f"<p>{html.escape(data['store'])} · {html.escape(state)} · {data['invocations']} invocation(s) · "
        f"report generated {html.escape(data['generated'])}</p>"
    )


def configuration(data: ReportData) -> str:
    """The run's identity, command line, package versions and final record, one field a row."""
    final = data["final"]
    rows: list[list[Any]] = [[k, v] for k, v in sorted(data["identity"].items())]
    meta = data.get("meta") or {}
    rows += [["command that made the store", " ".join(map(str, meta.get("command", [])))]]  # resumes may differ
    rows += [[f"version {k}", v] for k, v in sorted((meta.get("versions") or {}).items())]
    if final:
        rows += [
            ["best", final.get("best")],
            ["GPU profile", final.get("gpu_profile", "-")],
            ["end-to-end max rel err (float64)", f"{final.get('end_to_end_max_rel_err', float('nan')):.2e}"],
        ]
    return table(["field", "value"], rows, 2)


def fragments(data: ReportData) -> str:
    """A row per fragment: its preset and digest, its tasks, what it found and which μGraph it chose."""
    rows = [
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
    return table(
        ["fragment", "preset", "digest", "tasks done", "pending", "found", "confirmed", "layouts", "chosen"],
        rows,
        3,
    )


def _samples(data: ReportData) -> dict[str, Series]:
    """Each timeline chart's lines, by chart id, from the stored progress samples."""
    tl = data["timeline"]
    by_key: Sequence[Mapping[str, Any]] = tl  # series are named by their key

    def series(key: str) -> list[tuple[float, float]]:
        return [(s["elapsed"], float(s[key])) for s in by_key if s.get(key) is not None]

    names = [f["name"] for f in data["fragments"]]
    memo = {"shared memo (Redis)": [(x, 100 * y) for x, y in series("memo_remote_hit_rate")]}
    local = [(x, 100 * y) for x, y in series("memo_local_hit_rate")]
    if any(y > 0 for _, y in local):  # each oracle settles a term once, so the in-process LRU seldom hits
        memo["in-process LRU"] = local
    return {
        "chart-states": {
            n: [(s["elapsed"], float(s["fragments"][n]["states"])) for s in tl if n in s.get("fragments", {})]
            for n in names
        },
        "chart-rate": {"states/s": series("states_per_s_now")},
        "chart-memo": memo,
        "chart-solver": {"solver calls": series("solver_calls")},
        "chart-found": {"found": series("mugraphs"), "confirmed": series("confirmed")},
        "chart-best": data.get("best_so_far") or {},
        "chart-size": {"estimated states": series("estimated_states"), "explored states": series("states")},
    }


# (chart id, title, y axis label) of each timeline chart, in the page's order
TIMELINE_CHARTS = (
    ("chart-states", "States explored, per fragment", "states"),
    ("chart-rate", "States per second", "states/s"),
    ("chart-memo", "Memo hit rate: oracle queries answered by the memo", "% of lookups"),
    ("chart-solver", "Solver calls", "calls"),
    ("chart-found", "μGraphs found and confirmed", "μGraphs"),
    (
        "chart-best",
        "Best speedup over the reference so far, per fragment (final ranking's estimates, at each μGraph's find time)",
        "speedup (x)",
    ),
    ("chart-size", "Size of the space: estimated (Knuth probes) and explored", "states"),
)


def timeline(data: ReportData) -> str:
    """The run's charts over run time (invocations end to end, restarts marked)."""
    samples = _samples(data)
    span = (0.0, max((s["elapsed"] for s in data["timeline"]), default=1.0))
    charts = [
        line_chart(
            title,
            samples[chart_id],
            x_label="run time (s)",
            y_label=y_label,
            markers=data["restarts"],
            x_range=span,
            chart_id=chart_id,
            width=CHART_WIDTH,
        )
        for chart_id, title, y_label in TIMELINE_CHARTS
    ]
    note = (
        '<p class="note">Run time adds up the invocations and leaves out the gaps between them; dashed red '
        "lines mark where a resumed invocation began.</p>"
    )
    return note + "".join(charts)


def workers(data: ReportData) -> str:
    """Seconds each worker spent inside search tasks, and how uneven that was."""
    busy = data["workers"]
    mean = sum(w["busy_seconds"] for w in busy.values()) / len(busy) if busy else 0.0
    imbalance = (max(w["busy_seconds"] for w in busy.values()) / mean) if busy and mean > 0 else None
    return (
        bar_chart(
            "Seconds inside search tasks",
            {w: v["busy_seconds"] for w, v in busy.items()},
            unit="s",
            chart_id="chart-workers",
            width=CHART_WIDTH,
        )
        + table(["worker", "busy s", "tasks"], [[w, v["busy_seconds"], v["tasks"]] for w, v in busy.items()])
        + (f"<p>max/mean busy time: {imbalance:.2f}</p>" if imbalance else "")
    )


RANKING_HEAD = [
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
]


def _ranking_row(n: int, r: RankedRow, labels: Mapping[str, str]) -> list[Any]:
    """One ranked μGraph (or the reference) as a row of the ranking table."""
    return [
        n,
        "reference"
        if r.get("reference")
        else r["digest"][:16] + (f" (expert {labels[r['digest']]})" if r["digest"] in labels else ""),
        r["kernels"],
        f"{r['dram_bytes']:,}",
        f"{r.get('flops', 0):,}",
        seconds_text(r["estimated_seconds"]),
        speedup_text(r["speedup"]),
        r.get("bound", "-"),
        "yes" if r.get("fits", True) else "NO",
        f"{r.get('layout_cost', 0):,}",
    ]


def _fragment_ranking(name: str, rows: list[RankedRow], limit: int, labels: Mapping[str, str]) -> str:
    """One fragment's ranking: its first `limit` rows and the reference's, and how many more there are."""
    shown = rows_to_show(rows, limit)
    profile = rows[0].get("profile", "-") if rows else "-"
    hidden = len(rows) - len(shown)
    more = (
        (
            f'<p class="note">{hidden} more rows in the store (`mugraph show --all` lists them); the reference '
            "row is always shown.</p>"
        )
        if hidden
        else ""
    )
    body = [_ranking_row(n, r, labels) for n, r in shown]
    is_ref = [bool(r.get("reference")) for _, r in shown]
    return (
        f"<h3>{html.escape(name)} on {html.escape(str(profile))} ({len(rows)} ranked)</h3>"
        + table(RANKING_HEAD, body, 2, is_ref)
        + more
    )


def ranking(data: ReportData, limit: int) -> str:
    """Every fragment's ranking, at most `limit` rows each besides the reference's."""
    labels = data.get("experts") or {}
    parts = [_fragment_ranking(name, rows, limit, labels) for name, rows in data["ranking"].items()]
    return "".join(parts) or '<p class="empty">no ranking yet</p>'


def mugraphs(data: ReportData) -> str:
    """Each chosen μGraph drawn, with its layouts."""
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
    return "".join(graphs) or '<p class="empty">none yet</p>'


def counters(data: ReportData) -> str:
    """The search counters summed over done tasks, each with what it counts."""
    rows = [
        [
            k,
            COUNTER_MEANINGS.get(k, ""),
            f"{v:,.3f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):,}",
        ]
        for k, v in sorted(data["counters"].items())
    ]
    tasks = data["tasks"]
    return f"<p>tasks: {tasks['done']:,} done, {tasks['pending']:,} pending</p>" + table(
        ["counter", "what it counts", "value"], rows, 2
    )
