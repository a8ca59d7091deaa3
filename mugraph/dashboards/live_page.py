"""The Bokeh document of the live search page, one per browser session, served by the scheduler's
dashboard (live.py attaches it). A periodic callback reads the LiveState the scheduler plugin keeps:
new rows are streamed, the whole series sent again only when the state replaced its rows.

Every data source has a name ("mugraph-states", "mugraph-rates", "mugraph-tasks", "mugraph-memo",
"mugraph-results", "mugraph-fragments", "mugraph-workers", "mugraph-events") and so has the header
("mugraph-header"), so a script can find them with `Bokeh.documents[0].get_model_by_name(...)`.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from bokeh.core.properties import value
from bokeh.document import Document
from bokeh.layouts import column, gridplot
from bokeh.models import BasicTickFormatter, ColumnDataSource, DataRange1d, FactorRange, Range1d
from bokeh.models.glyphs import Line
from bokeh.models.renderers import GlyphRenderer
from bokeh.models.widgets import DataTable, Div, TableColumn
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from mugraph.dashboards.live_state import RATE_WINDOW, LiveState
from mugraph.dashboards.summary import eta_rate, eta_text
from mugraph.ir.plural import counted, noun

logger = logging.getLogger(__name__)

UPDATE_MS = 1000
HEIGHT = 260
TITLE = "Dask: mugraph search"
ALL_COLOR = "#222222"


def _palette(i: int) -> str:
    return str(Category10_10[i % len(Category10_10)])


# Each time plot: (source name, title, [(column, label, color, dash)], per-fragment column suffix or
# None, y axis label)
LineSpec = tuple[str, str, str, str]
TIME_PLOTS: list[tuple[str, str, list[LineSpec], str | None, str]] = [
    (
        "mugraph-states",
        "States explored (the estimated size: click its legend entry)",
        [
            ("states", "all fragments", ALL_COLOR, "solid"),
            ("estimated_states", "estimated size", "#888888", "dashed"),
        ],
        "states",
        "states",
    ),
    (
        "mugraph-rates",
        f"States/s (over {RATE_WINDOW:.0f} s)",
        [
            ("rate", "all fragments", ALL_COLOR, "solid"),
            ("states_per_s", "invocation average", "#888888", "dashed"),
        ],
        "rate",
        "states/s",
    ),
    (
        "mugraph-tasks",
        "Search tasks (pending = the frontier)",
        [
            ("tasks_done", "done", _palette(2), "solid"),
            ("tasks_running", "running", _palette(1), "solid"),
            ("tasks_pending", "pending", _palette(0), "solid"),
        ],
        None,
        "tasks",
    ),
    (
        "mugraph-memo",
        "Memo hit rate (share of oracle queries the memo answered)",
        [
            ("memo_local", "in-process LRU", _palette(0), "solid"),
            ("memo_remote", "shared memo (Redis)", _palette(3), "solid"),
        ],
        None,
        "hits / lookups",
    ),
    (
        "mugraph-best",
        "Best estimated speedup over the reference so far, per fragment",
        [("speedup_one", "the reference", "#888888", "dashed")],
        "best",
        "speedup (x)",
    ),
    (
        "mugraph-results",
        "Solver calls and fingerprints",
        [
            ("solver_calls", "solver calls", _palette(3), "solid"),
            ("fingerprints", "fingerprints", _palette(0), "solid"),
        ],
        None,
        "count",
    ),
]


class LivePage:
    """The page's models; `update` brings them up to date with the state."""

    def __init__(self, state: LiveState) -> None:
        self.state = state
        self._epoch = -1
        self._version = -1
        self._sent = 0
        self._lines: dict[str, list[GlyphRenderer[Line]]] = {}  # source name -> its per-fragment lines, by index
        self._renderers: dict[str, GlyphRenderer[Line]] = {}  # the run-wide lines, by their column
        self.header = Div(name="mugraph-header", text="", sizing_mode="stretch_width")
        x_range = DataRange1d(only_visible=True)  # time plots pan and zoom together
        # source name -> (source, figure, its run-wide lines, per-fragment key suffix or None)
        self.series: dict[str, tuple[ColumnDataSource, Any, list[LineSpec], str | None]] = {}
        figures = [self._time_plot(x_range, *plot) for plot in TIME_PLOTS]
        # The estimate dwarfs the explored states for most of a run: shown on request, so the axis fits
        # what was explored. The in-process LRU's line shows once it has a hit (it seldom does).
        self._renderers["estimated_states"].visible = False
        self._renderers["memo_local"].visible = False
        figures.append(self._found_plot(x_range))
        figures += self._bar_plots()
        table = self._events_table()
        grid = gridplot(figures, ncols=2, sizing_mode="stretch_width", toolbar_location="right", merge_tools=False)
        self.root = column(self.header, grid, table, sizing_mode="stretch_width", name="mugraph-page")
        self.update()

    def _time_plot(
        self, x_range: DataRange1d, name: str, title: str, lines: list[LineSpec], per_fragment: str | None, y_label: str
    ) -> Any:
        """One plot over time with its source and its run-wide lines (per-fragment ones come with the
        fragments, in `_fragment_lines`)."""
        keys = [k for k, *_ in lines]
        source = ColumnDataSource(name=name, data={k: [] for k in ("t", *keys)})
        fig = self._time_figure(title, x_range, y_label)
        if name == "mugraph-memo":
            fig.y_range = Range1d(start=0, end=1.02)
        for key, label, color, dash in lines:
            self._renderers[key] = fig.line(
                x="t", y=key, source=source, legend_label=label, color=color, line_dash=dash, line_width=2
            )
        self._legend(fig)
        self.series[name] = (source, fig, lines, per_fragment)
        return fig

    def _found_plot(self, x_range: DataRange1d) -> Any:
        """μGraphs found and confirmed: from the results source, in a figure of their own."""
        results = self.series["mugraph-results"][0]
        found = self._time_figure("μGraphs", x_range, "μGraphs")
        for key, label, color in (("mugraphs", "found", _palette(1)), ("confirmed", "confirmed", _palette(2))):
            found.line(x="t", y=key, source=results, legend_label=label, color=color, line_width=2)
        self._legend(found)
        return found

    def _bar_plots(self) -> list[Any]:
        """Search tasks per fragment and busy seconds per worker: bars whose categories (the
        fragments, the workers) `_update` sets as they come."""
        self.fragments = ColumnDataSource(
            name="mugraph-fragments", data={"fragment": [], "done": [], "running": [], "pending": []}
        )
        self.task_range, self.busy_range = FactorRange(), FactorRange()
        tasks = figure(
            title="Search tasks per fragment",
            y_range=self.task_range,
            x_range=DataRange1d(start=0),
            height=HEIGHT,
            sizing_mode="stretch_width",
            tools="save,reset",
            x_axis_label="tasks",
        )
        tasks.hbar_stack(
            ["done", "running", "pending"],
            y="fragment",
            height=0.7,
            source=self.fragments,
            color=[_palette(2), _palette(1), _palette(0)],
            legend_label=["done", "running", "pending"],
        )
        self.workers = ColumnDataSource(name="mugraph-workers", data={"worker": [], "label": [], "busy": []})
        busy = figure(
            title="Busy seconds per worker (inside search tasks)",
            y_range=self.busy_range,
            x_range=DataRange1d(start=0),
            height=HEIGHT,
            sizing_mode="stretch_width",
            tools="hover,save,reset",
            x_axis_label="seconds",
            tooltips=[("worker", "@worker"), ("busy", "@busy{0.0} s")],
        )
        busy.hbar(y="label", right="busy", height=0.7, source=self.workers, color=_palette(0))
        self._legend(tasks)
        tasks.add_layout(tasks.legend[0], "right")
        return [tasks, busy]

    def _events_table(self) -> DataTable:
        """The latest μGraph events (found, confirmed, laid out), newest first."""
        self.events = ColumnDataSource(
            name="mugraph-events", data={"time": [], "event": [], "fragment": [], "digest": []}
        )
        return DataTable(
            source=self.events,
            height=HEIGHT,
            sizing_mode="stretch_width",
            index_position=None,
            reorderable=False,
            columns=[
                TableColumn(field="time", title="time (UTC)"),
                TableColumn(field="event", title="μGraph event"),
                TableColumn(field="fragment", title="fragment"),
                TableColumn(field="digest", title="digest"),
            ],
        )

    @staticmethod
    def _time_figure(title: str, x_range: DataRange1d, y_label: str) -> Any:
        # Counts start at 0, and a plot with nothing yet shows 0..1 rather than Bokeh's empty -1..1;
        # the axis fits the lines shown (a hidden one does not stretch it).
        fig = figure(
            title=title,
            x_axis_type="datetime",
            x_range=x_range,
            height=HEIGHT,
            sizing_mode="stretch_width",
            tools="xpan,xwheel_zoom,box_zoom,reset,save",
            y_axis_label=y_label,
            y_range=DataRange1d(start=0, min_interval=1, only_visible=True),
        )
        for axis in fig.yaxis:
            axis.formatter = BasicTickFormatter(use_scientific=False)
        return fig

    @staticmethod
    def _legend(fig: Any, location: str = "top_left") -> None:
        fig.legend.location = location
        fig.legend.click_policy = "hide"
        fig.legend.background_fill_alpha = 0.6

    def _keys(self, name: str) -> list[str]:
        _, _, lines, suffix = self.series[name]
        keys = [k for k, *_ in lines]
        if suffix is not None:
            keys += [f"f{i}_{suffix}" for i in range(len(self.state.fragments))]
        if name == "mugraph-results":
            keys += ["mugraphs", "confirmed"]
        return keys

    def update(self) -> None:
        try:
            self._update()
        except Exception:  # a page must not take the scheduler's loop down with it
            logger.exception("mugraph live page: update failed")

    def _update(self) -> None:
        st = self.state
        self.header.text = self._header_html()
        if st.version == self._version:
            return
        self._version = st.version
        if st.epoch != self._epoch or self._sent > len(st.rows):
            for name, (source, *_) in self.series.items():
                source.data = dict(st.columns(self._keys(name)))
            self._epoch = st.epoch
        elif len(st.rows) > self._sent:
            for name, (source, *_) in self.series.items():
                source.stream(dict(st.columns(self._keys(name), start=self._sent)))
        self._sent = len(st.rows)
        if not self._renderers["memo_local"].visible and any(r.get("memo_local", 0) > 0 for r in st.rows):
            self._renderers["memo_local"].visible = True
        self._fragment_lines()
        frag = st.fragment_tasks()
        self.task_range.factors = list(frag["fragment"])
        self.fragments.data = frag
        workers = st.worker_busy()
        self.busy_range.factors = list(workers["label"])
        self.workers.data = workers
        recent = list(st.recent)
        self.events.data = {
            "time": [
                datetime.fromtimestamp(e["wall"], UTC).strftime("%H:%M:%S") if e["wall"] == e["wall"] else ""
                for e in recent
            ],
            "event": [e["event"] for e in recent],
            "fragment": [e["fragment"] for e in recent],
            "digest": [e["digest"][:16] for e in recent],
        }

    def _fragment_lines(self) -> None:
        """A line per fragment in the per-fragment plots (fragments may show up after the page opened,
        and another run on the same scheduler may have other ones)."""
        names = self.state.fragments
        for name, (source, fig, _, suffix) in self.series.items():
            if suffix is None:
                continue
            lines = self._lines.setdefault(name, [])
            for i in range(len(lines), len(names)):
                lines.append(
                    fig.line(
                        x="t",
                        y=f"f{i}_{suffix}",
                        source=source,
                        legend_label=names[i],
                        color=_palette(i),
                        line_width=1.5,
                    )
                )
            for i, line in enumerate(lines):
                line.visible = i < len(names)
                for item in fig.legend[0].items:
                    if line in item.renderers and i < len(names) and item.label != value(names[i]):
                        item.label = value(names[i])

    def _header_html(self) -> str:
        st = self.state
        start, latest = st.start, st.latest
        esc: Callable[[Any], str] = lambda v: html.escape(str(v))  # noqa: E731
        program = esc(start.get("program", "?"))
        parts = [f"<b>mugraph {program}</b> &mdash; {esc(st.status())}"]
        if start:
            verb = "resumed" if start.get("resumed") else "new run"
            presets = start.get("presets")
            presets = presets if isinstance(presets, Mapping) else {}
            frags = ", ".join(f"{esc(f)} ({esc(presets.get(f, '-'))})" for f in st.fragments)
            parts.append(f"store <code>{esc(start.get('store', '?'))}</code> ({verb}); fragments: {frags}")
        if latest:
            rate, found = latest.get("states_per_s"), latest.get("mugraphs")
            parts.append(
                f"search time {_duration(st.elapsed())}; {_int(latest.get('states'))} states"
                f" ({_int(rate)}/s this invocation); tasks {_int(latest.get('tasks_done'))} done,"
                f" {_int(latest.get('tasks_running'))} running, {_int(latest.get('tasks_pending'))} pending;"
                f" {_int(found)} {noun(int(_number(found) or 0), 'μGraph')} found,"
                f" {_int(latest.get('confirmed'))} confirmed;"
                f" {_int(latest.get('solver_calls'))} solver calls;"
                f" {counted(len(st.workers), 'worker')}"
            )
            parts.append(
                "size: "
                + esc(
                    eta_text(
                        _number(latest.get("states")) or 0,
                        _number(latest.get("estimated_states")),
                        int(_number(latest.get("tasks_pending")) or 0) + int(_number(latest.get("tasks_running")) or 0),
                        eta_rate(latest),
                    )
                )
            )
        age = time.time() - st.updated
        parts.append(f"<small>{st.events} events, last {age:.0f} s ago</small>")
        return "<div style='font-size:13px;line-height:1.5'>" + "<br>".join(parts) + "</div>"


def _int(v: object) -> str:
    return f"{int(v):,}" if isinstance(v, int | float) and v == v else "-"


def _number(v: object) -> float | None:
    """A field of an event as it came through the scheduler: its number, or None."""
    return v if isinstance(v, int | float) else None


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def document(state: LiveState, scheduler: Any, extra: Mapping[str, object], doc: Document) -> None:
    """Build one session's document: `extra` is the dashboard's template variables (its nav bar)."""
    page = LivePage(state)
    doc.add_root(page.root)
    doc.title = TITLE
    doc.add_periodic_callback(page.update, UPDATE_MS)
    try:  # the Dask dashboard's look and nav bar; the page works without them
        from distributed.dashboard.components.scheduler import BOKEH_THEME, env

        doc.theme = BOKEH_THEME
        doc.template = env.get_template("simple.html")
        doc.template_variables.update(extra)
    except Exception:
        logger.debug("mugraph live page: no Dask dashboard template", exc_info=True)
