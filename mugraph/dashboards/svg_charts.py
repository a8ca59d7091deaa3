"""Small inline-SVG charts for the report: no JavaScript, no fonts or files fetched, any browser.

Each chart is a string of SVG; values are escaped, coordinates rounded, and a chart with no data
says so instead of drawing empty axes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
Series = Sequence[tuple[float, float]]


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = [start]
    while ticks[-1] < hi - 1e-9 * step:  # up to the first tick at or above hi, so the top is labelled
        ticks.append(start + len(ticks) * step)
    return ticks


def _fmt(v: float) -> str:
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-2):
        return f"{v:.2g}"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def line_chart(
    title: str,
    series: Mapping[str, Series],
    *,
    x_label: str,
    y_label: str,
    markers: Sequence[float] = (),
    x_range: tuple[float, float] | None = None,
    width: int = 640,
    height: int = 260,
    chart_id: str = "",
) -> str:
    """Lines over a shared x axis (`x_range` fixes it, so charts of one timeline line up); `markers`
    draws dashed vertical lines (e.g. restarts)."""
    points = [p for s in series.values() for p in s if all(math.isfinite(v) for v in p)]
    ident = f' id="{html.escape(chart_id)}"' if chart_id else ""
    head = f'<figure class="chart"{ident}><figcaption>{html.escape(title)}</figcaption>'
    if not points:
        return head + '<p class="empty">no data</p></figure>'
    left, right, top, bottom = 64, 16, 26, 40  # the legend sits above the plot
    x0, x1 = x_range or (min(p[0] for p in points), max(p[0] for p in points))
    y0, y1 = min(0.0, min(p[1] for p in points)), max(p[1] for p in points)
    xt, yt = _nice_ticks(x0, x1), _nice_ticks(y0, y1)
    x0, x1, y0, y1 = min(x0, xt[0]), max(x1, xt[-1]), min(y0, yt[0]), max(y1, yt[-1])
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1) * pw

    def sy(y: float) -> float:
        return top + ph - (y - y0) / ((y1 - y0) or 1) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{html.escape(title)}">'
    ]
    for t in yt:
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    for t in xt:
        out.append(f'<text x="{sx(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    for m in markers:
        out.append(f'<line x1="{sx(m):.1f}" x2="{sx(m):.1f}" y1="{top}" y2="{top + ph}" class="marker"/>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" class="axis"/>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle">{html.escape(x_label)}</text>')
    out.append(
        f'<text x="14" y="{top + ph / 2:.0f}" transform="rotate(-90 14 {top + ph / 2:.0f})" '
        f'text-anchor="middle">{html.escape(y_label)}</text>'
    )
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s if math.isfinite(x) and math.isfinite(y))
        if pts:
            out.append(
                f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2" '
                f'data-series="{html.escape(name)}"/>'
            )
        out.append(
            f'<rect x="{left + 8 + 130 * i}" y="4" width="10" height="10" fill="{color}"/>'
            f'<text x="{left + 22 + 130 * i}" y="13">{html.escape(name)}</text>'
        )
    out.append("</svg>")
    return head + "".join(out) + "</figure>"


def bar_chart(title: str, bars: Mapping[str, float], *, unit: str, width: int = 640, chart_id: str = "") -> str:
    """Horizontal bars, one per label, with the value written beside each."""
    ident = f' id="{html.escape(chart_id)}"' if chart_id else ""
    head = f'<figure class="chart"{ident}><figcaption>{html.escape(title)}</figcaption>'
    if not bars:
        return head + '<p class="empty">no data</p></figure>'
    left, row = 220, 22
    height = row * len(bars) + 10
    top = max(bars.values()) or 1.0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{html.escape(title)}">'
    ]
    for i, (label, v) in enumerate(bars.items()):
        w = (width - left - 90) * v / top
        y = 5 + i * row
        out.append(
            f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{html.escape(label[-32:])}</text>'
            f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{row - 6}" fill="{PALETTE[0]}" '
            f'data-value="{v}"/><text x="{left + w + 6:.1f}" y="{y + 14}">{_fmt(v)} {html.escape(unit)}</text>'
        )
    out.append("</svg>")
    return head + "".join(out) + "</figure>"
