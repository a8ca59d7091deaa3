"""A μGraph drawn as inline SVG: the kernel graph left to right by depth, and under it each
graph-defined op's block graph (grid, for-loop, its inputs' maps) drawn the same way.

Boxes stand in columns (by depth) and rows; edges run only through the empty lanes between
them, so an edge never crosses a box: out of its source's right side into the column gap, along
the gap between two rows to the column gap before its target, then into the target's left side.
Each edge gets its own offset in the gaps it uses, so edges that share a gap stay apart."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import assert_never

from mugraph.ir.graph import BlockGraph, KernelGraph, Op
from mugraph.ir.shapes import fmt
from mugraph.ir.types import OpKind

BOX_W, BOX_H, GAP_X, GAP_Y, TOP = 150, 40, 48, 26, 40
LANE = 6  # pixels between edges sharing a gap
_FILL = {"input": "#e8f1fb", "output": "#e9f7ec", "customized": "#fff1db", "accum": "#f3e8fb", "op": "#f4f4f4"}


def _label(op: Op, tensors: Sequence[object], level: str) -> tuple[str, str, str]:
    """(title, detail, fill) of one op's box."""
    match op.kind:
        case OpKind.INPUT:
            shape = fmt(getattr(tensors[op.outputs[0]], "shape", ()))
            if level == "kernel":
                return f"input {op.attr('name')}", shape, _FILL["input"]
            return f"input imap={fmt(op.dims_attr('imap'))}", f"fmap={op.int_attr('fmap')} {shape}", _FILL["input"]
        case OpKind.OUTPUT:
            detail = f"omap={fmt(op.dims_attr('omap'))}" if level == "block" else str(op.attr("name"))
            return "output", detail, _FILL["output"]
        case OpKind.CUSTOMIZED if op.block is not None:
            b = op.block
            return "graph-defined op", f"grid={fmt(b.grid)} loop={b.forloop}", _FILL["customized"]
        case OpKind.ACCUM_NO_RED | OpKind.ACCUM_SUM | OpKind.ACCUM_MEAN | OpKind.ACCUM_RMS | OpKind.ACCUM_REDTOX:
            return str(op.kind), fmt(getattr(tensors[op.outputs[0]], "shape", ())), _FILL["accum"]
        case (
            OpKind.CUSTOMIZED
            | OpKind.MATMUL
            | OpKind.EXP
            | OpKind.SQUARE
            | OpKind.SQRT
            | OpKind.MUL_SCALAR
            | OpKind.SILU
            | OpKind.GELU
            | OpKind.GELU_ERF
            | OpKind.RELU
            | OpKind.CLAMP
            | OpKind.ADD
            | OpKind.MUL
            | OpKind.DIV
            | OpKind.REDUCTION
            | OpKind.RMS_NORM
            | OpKind.LAYER_NORM
            | OpKind.CONCAT
        ):
            return str(op.kind), fmt(getattr(tensors[op.outputs[0]], "shape", ())), _FILL["op"]
        case _ as unreachable:
            assert_never(unreachable)


def _draw(graph: KernelGraph | BlockGraph, level: str, title: str) -> str:
    producer: dict[int, int] = {}
    depth: list[int] = []
    for i, op in enumerate(graph.ops):
        d = max((depth[producer[t]] + 1 for t in op.inputs if t in producer), default=0)
        depth.append(d)
        for t in op.outputs:
            producer[t] = i
    rows: dict[int, int] = {}
    pos: list[tuple[float, float]] = []
    for d in depth:
        r = rows.get(d, 0)
        rows[d] = r + 1
        pos.append((10 + d * (BOX_W + GAP_X), TOP + r * (BOX_H + GAP_Y)))
    width = 20 + (max(depth, default=0) + 1) * (BOX_W + GAP_X)
    height = TOP + 10 + max(rows.values(), default=1) * (BOX_H + GAP_Y)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'class="mugraph" data-level="{level}" data-ops="{len(graph.ops)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
        f'<text x="10" y="18" class="gtitle">{html.escape(title)}</text>',
    ]
    lanes: dict[tuple[str, float], int] = {}
    for i, op in enumerate(graph.ops):
        made = [t for t in op.inputs if t in producer]
        for k, t in enumerate(made):
            points = _route(pos[producer[t]], pos[i], _port(k, len(made)), lanes)
            out.append(
                f'<polyline points="{" ".join(f"{x:.0f},{y:.0f}" for x, y in points)}" fill="none" '
                'stroke="#555" marker-end="url(#arrow)" class="edge"/>'
            )
    for i, op in enumerate(graph.ops):
        x, y = pos[i]
        head, detail, fill = _label(op, graph.tensors, level)
        out.append(
            f'<g class="op" data-kind="{html.escape(str(op.kind))}"><rect x="{x:.0f}" y="{y:.0f}" '
            f'width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" stroke="#888"/>'
            f'<text x="{x + 6:.0f}" y="{y + 16:.0f}">{html.escape(head)}</text>'
            f'<text x="{x + 6:.0f}" y="{y + 32:.0f}" class="detail">{html.escape(detail)}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def _lane(lanes: dict[tuple[str, float], int], key: tuple[str, float]) -> int:
    n = lanes.get(key, 0)
    lanes[key] = n + 1
    return n


def _port(k: int, n: int) -> float:
    """Where the k-th of n incoming edges meets its box's left side: in the lower half, below the
    height edges leave boxes at (OUT_PORT), so an edge leaving one box never lines up with an edge
    entering the next and reads as passing through it."""
    return BOX_H / 2 + 3 + (k + 0.5) * (BOX_H / 2 - 6) / n


OUT_PORT = BOX_H / 2 - 6  # edges leave a box's right side this far below its top


def _route(
    src: tuple[float, float], dst: tuple[float, float], port: float, lanes: dict[tuple[str, float], int]
) -> list[tuple[float, float]]:
    """Corner points of an edge from the right side of the box at `src` to the left side of the
    box at `dst` (a later column) through the gaps between columns and rows only."""
    (x0, y0), (x1, y1) = src, dst
    start, end = (x0 + BOX_W, y0 + OUT_PORT), (x1, y1 + port)
    if start[1] == end[1] and x1 - start[0] <= GAP_X:
        return [start, end]  # neighbours in one row: nothing between them
    gap_out = x0 + BOX_W + 8 + (_lane(lanes, ("x", x0)) * LANE) % (GAP_X - 16)
    if x1 - start[0] <= GAP_X:  # the next column: down or up inside the one gap between them
        return [start, (gap_out, start[1]), (gap_out, end[1]), end]
    # Along the gap between rows nearest the target's side of the source.
    row_gap = y0 + BOX_H + 4 if y1 >= y0 else y0 - GAP_Y + 4
    lane_y = row_gap + (_lane(lanes, ("y", row_gap)) * LANE) % (GAP_Y - 8)
    gap_in = x1 - GAP_X + 8 + (_lane(lanes, ("x", x1 - GAP_X - BOX_W)) * LANE) % (GAP_X - 16)
    return [start, (gap_out, start[1]), (gap_out, lane_y), (gap_in, lane_y), (gap_in, end[1]), end]


def draw_mugraph(graph: KernelGraph, title: str) -> str:
    """The kernel graph, then one drawing per block graph."""
    parts = [_draw(graph, "kernel", f"{title}: kernel graph")]
    for i, op in enumerate(graph.ops):
        if op.block is not None:
            b = op.block
            parts.append(
                _draw(
                    b,
                    "block",
                    f"block graph of op {i}: grid {list(b.grid)}, for-loop {b.forloop}, "
                    f"{b.smem_bytes:,} B shared memory",
                )
            )
    return '<div class="graphs">' + "".join(parts) + "</div>"
