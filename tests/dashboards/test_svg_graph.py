"""Drawn μGraphs: every edge runs from its source box to its target box and crosses no box on the way
(rms_norm's block graph once drew accum_rms → div straight through the accum_no_red box)."""

from __future__ import annotations

import itertools
import re

import pytest

from mugraph.dashboards.svg_graph import draw_mugraph
from mugraph.ir.graph import KernelGraph
from tests.helpers.builtin import EXPERTS, PROGRAMS

Box = tuple[float, float, float, float]
Point = tuple[float, float]

RECT = re.compile(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" rx')
POLY = re.compile(r'<polyline points="([^"]+)"[^>]*marker-end')
LINE = re.compile(r'<line x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)"[^>]*marker-end')


def edges(svg: str) -> list[list[Point]]:
    out = [[(float(a), float(b)) for a, b in (p.split(",") for p in m.split())] for m in POLY.findall(svg)]
    out += [[(float(a), float(b)), (float(c), float(d))] for a, b, c, d in LINE.findall(svg)]
    return out


def crosses(p: Point, q: Point, box: Box) -> bool:
    """Whether segment pq meets the inside of `box` (its border excluded), by clipping (Liang-Barsky)."""
    x, y, w, h = box
    lo, hi = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for d, a, b in ((dx, p[0] - (x + 0.5), (x + w - 0.5) - p[0]), (dy, p[1] - (y + 0.5), (y + h - 0.5) - p[1])):
        for num, den in ((a, -d), (b, d)):
            if den == 0:
                if num < 0:
                    return False
            elif den > 0:
                hi = min(hi, num / den)
            else:
                lo = max(lo, num / den)
    return lo < hi


def on_left_side(pt: Point, box: Box) -> bool:
    x, y, _, h = box
    return pt[0] == x and y <= pt[1] <= y + h


def on_right_side(pt: Point, box: Box) -> bool:
    x, y, w, h = box
    return pt[0] == x + w and y <= pt[1] <= y + h


def check_drawing(svg: str) -> int:
    """Per drawn graph: every edge leaves one box's right side, enters another's left side, and
    no segment crosses any box. Returns the number of edges checked."""
    n = 0
    for one in svg.split("<svg")[1:]:
        boxes: list[Box] = [(float(x), float(y), float(w), float(h)) for x, y, w, h in RECT.findall(one)]
        for pts in edges(one):
            assert any(on_right_side(pts[0], b) for b in boxes), pts
            assert any(on_left_side(pts[-1], b) for b in boxes), pts
            for p, q in itertools.pairwise(pts):
                hit = [b for b in boxes if crosses(p, q, b)]
                assert not hit, f"segment {p}->{q} crosses box {hit}"
            n += 1
    return n


def producer_edges(g: KernelGraph) -> int:
    """Edges the drawing must have: one per (op, operand made by another op), kernel and block graphs."""

    def count(graph: object) -> int:
        made = {t for op in graph.ops for t in op.outputs}  # type: ignore[attr-defined]
        return sum(t in made for op in graph.ops for t in op.inputs)  # type: ignore[attr-defined]

    return count(g) + sum(count(op.block) for op in g.ops if op.block is not None)


def test_rms_norm_block_graph_edges_go_round_the_boxes() -> None:
    g = PROGRAMS["rms_norm"].experts["expert"]()
    svg = draw_mugraph(g, "rms_norm")
    assert check_drawing(svg) == producer_edges(g)


@pytest.mark.parametrize(("name", "label"), EXPERTS + [(name, "reference") for name in PROGRAMS])
def test_no_edge_crosses_a_box(name: str, label: str) -> None:
    prog = PROGRAMS[name]
    g = prog.reference() if label == "reference" else prog.experts[label]()
    svg = draw_mugraph(g, f"{name} {label}")
    assert check_drawing(svg) == producer_edges(g)
