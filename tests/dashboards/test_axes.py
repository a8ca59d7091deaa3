"""Axes that fit the data: a count plot with nothing in it yet shows 0..1, never Bokeh's empty -1..1;
report charts of zeros start at 0."""

from __future__ import annotations

import re

from bokeh.models import DataRange1d, Range1d

from mugraph.dashboards.live_page import LivePage
from mugraph.dashboards.live_state import LiveState
from mugraph.dashboards.svg_charts import line_chart


def test_live_count_plots_start_at_zero_when_empty() -> None:
    page = LivePage(LiveState())
    figures = [fig for _, fig, _, _ in page.series.values()]
    assert figures
    for fig in figures:
        rng = fig.y_range
        if isinstance(rng, Range1d):  # the hit-rate plot: a fixed 0..1
            assert (rng.start, rng.end) == (0, 1.02)
            continue
        assert isinstance(rng, DataRange1d) and rng.start == 0 and rng.min_interval == 1, fig.title.text


def test_a_chart_of_zeros_has_a_zero_to_one_axis() -> None:
    svg = line_chart("μGraphs", {"found": [(0.0, 0.0), (5.0, 0.0)]}, x_label="s", y_label="μGraphs")
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([-\d.]+)</text>', svg)]
    assert ticks[0] == 0 and ticks[-1] == 1 and min(ticks) >= 0
