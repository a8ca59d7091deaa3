"""Rank the confirmed μGraphs of a fragment by their roofline estimate under their chosen layouts.

A row carries every term of the estimate and of the layout cost, so the table says why a μGraph
ranks where it does. μGraphs that do not fit the profile's shared memory rank last; equal estimates
are ordered by the no-overlap time, then the layout cost, then the digest, so the same store always
gives the same ranking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mugraph.ir.graph import KernelGraph
from mugraph.stages.layout.choose import LayoutResult
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.profiles import GpuProfile
from mugraph.stages.layout.roofline import MODEL, estimate


def ranking_row(digest: str, graph: KernelGraph, layout: LayoutResult, profile: GpuProfile,
                reference_seconds: float) -> dict[str, Any]:
    est = estimate(graph, layout.layouts, profile)
    totals = est.totals()
    seconds = totals["estimated_seconds"]
    return {
        "digest": digest, **totals,
        "speedup": reference_seconds / seconds if seconds > 0 else 0.0,
        "layout_cost": layout.objective, "layout_terms": dict(layout.terms),
        "layouts": layout.layouts.to_json(), "profile": profile.name, "model": MODEL,
    }


def rank(candidates: Mapping[str, tuple[KernelGraph, LayoutResult]], reference: tuple[KernelGraph, LayoutResult],
         profile: GpuProfile) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows of the candidates, best first; the reference's row). Speedups are over the reference."""
    ref_graph, ref_layout = reference
    base = estimate(ref_graph, ref_layout.layouts, profile).seconds
    ref_row = ranking_row("reference", ref_graph, ref_layout, profile, base)
    rows = [ranking_row(d, g, lay, profile, base) for d, (g, lay) in candidates.items()]
    rows.sort(key=lambda r: (not r["fits"], r["estimated_seconds"], r["no_overlap_seconds"], r["layout_cost"],
                             r["digest"]))
    return rows, ref_row


def combined(rows: list[dict[str, Any]], reference_row: dict[str, Any]) -> list[dict[str, Any]]:
    """Candidates and the reference in one order (the reference flagged), best first; on a tie the
    reference wins, since replacing it would gain nothing."""
    flagged = [{**r, "reference": False} for r in rows] + [{**reference_row, "reference": True}]
    return sorted(flagged, key=lambda r: (not r["fits"], r["estimated_seconds"], not r["reference"]))


def rerank(stored: list[dict[str, Any]], graphs: Mapping[str, KernelGraph], profile: GpuProfile,
           ) -> list[dict[str, Any]]:
    """A stored combined ranking again under another profile, from the layouts its rows keep (no
    solver needed). `graphs` maps each row's digest to its graph."""
    def result(row: Mapping[str, Any]) -> LayoutResult:
        return LayoutResult(Layouts.from_json(row["layouts"]), dict(row["layout_terms"]), int(row["layout_cost"]), 0.0)

    ref = next(r for r in stored if r.get("reference"))
    candidates = {r["digest"]: (graphs[r["digest"]], result(r)) for r in stored if not r.get("reference")}
    rows, ref_row = rank(candidates, (graphs[ref["digest"]], result(ref)), profile)
    ref_row["digest"] = ref["digest"]
    return combined(rows, ref_row)


def measured_first(ordered: list[dict[str, Any]], measurements: Mapping[str, Mapping[str, Any]],
                   ) -> list[dict[str, Any]]:
    """A combined ranking with GPU measurements applied: rows timed on a GPU (with outputs that matched
    the reference) come first, fastest first, each with its measured time, device and measured speedup
    over the reference; the other rows follow in the model's order. A failed or wrong measurement is
    kept on its row as `measure_error` and does not move it."""
    ref = next((r["digest"] for r in ordered if r.get("reference")), None)
    ref_m = measurements.get(ref) if ref is not None else None
    ref_seconds = ref_m.get("median_seconds") if ref_m and ref_m.get("ok") else None
    rows = []
    for r in ordered:
        row = {k: v for k, v in r.items() if not k.startswith("measure")}
        m = measurements.get(r["digest"])
        if m is not None and m.get("ok") and m.get("median_seconds"):
            row.update(measured_seconds=float(m["median_seconds"]), measured_device=m.get("device"),
                       measured_speedup=ref_seconds / float(m["median_seconds"]) if ref_seconds else None)
        elif m is not None:
            row["measure_error"] = m.get("error") or f"outputs off by {m.get('max_rel_err')} (relative)"
        rows.append(row)
    timed = sorted((r for r in rows if "measured_seconds" in r),
                   key=lambda r: (r["measured_seconds"], not r.get("reference"), r["digest"]))
    return timed + [r for r in rows if "measured_seconds" not in r]
