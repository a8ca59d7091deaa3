"""Rank the confirmed μGraphs of a fragment by the estimate of the kernels codegen emits for them
(`emitted`), the roofline terms under their chosen layouts kept beside it.

A row carries every term of both estimates and of the layout cost, so the table says why a μGraph
ranks where it does. μGraphs that do not fit the profile's shared memory rank last; equal estimates
are ordered by the roofline time, the no-overlap time, then the layout cost, then the digest, so the
same store always gives the same ranking. Rows whose estimates lie within the model's measured error
of the next row's are marked `near_tie`, with the term that separates them. A candidate replaces the
reference only when it is estimated faster by more than that error and its kernels' registers fit
with that error to spare (`confident`): the model sold slowdowns as speedups when it did not say how sure it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, cast

from mugraph.ir.graph import KernelGraph
from mugraph.stages.layout.choose import LayoutResult
from mugraph.stages.layout.cost_model import CostModel
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.emitted import EMITTED, model_named, written_model
from mugraph.stages.layout.profiles import GpuProfile
from mugraph.stages.layout.residency import MAX_REGISTERS
from mugraph.stages.layout.roofline import MODEL, estimate
from mugraph.stages.layout.rows import RankedRow, RankRow

# the emitted model's median absolute error on held-out H100 rows (benchmarks/RESULTS.md: 7%, rounded
# up): two estimates closer than this are a near tie; a speedup below 1 + this is not confident
MODEL_ERROR = 0.10


def ranking_row(
    digest: str,
    graph: KernelGraph,
    layout: LayoutResult,
    profile: GpuProfile,
    reference_seconds: float,
    model: CostModel = EMITTED,
) -> RankRow:
    """The row of one μGraph; its keys are RankRow's (a test checks the two agree). `model` gives the
    estimate it is ranked by; the roofline's terms under its layouts are kept beside it."""
    est = estimate(graph, layout.layouts, profile)
    totals = est.totals()
    emitted = model.predict(graph, layout.layouts, profile)
    seconds = emitted["estimated_seconds"]
    return cast(
        RankRow,
        {
            "digest": digest,
            **totals,
            "roofline_seconds": totals["estimated_seconds"],
            "roofline_model": MODEL,
            **{f"emitted_{k}": v for k, v in emitted.items() if k != "estimated_seconds"},
            "estimated_seconds": seconds,
            "speedup": reference_seconds / seconds if seconds > 0 else 0.0,
            "layout_cost": layout.objective,
            "layout_terms": dict(layout.terms),
            "layouts": layout.layouts.to_json(),
            "profile": profile.name,
            "model": emitted["model"],
        },
    )


def rank(
    candidates: Mapping[str, tuple[KernelGraph, LayoutResult]],
    reference: tuple[KernelGraph, LayoutResult],
    profile: GpuProfile,
    model: CostModel = EMITTED,
) -> tuple[list[RankRow], RankRow]:
    """(rows of the candidates, best first; the reference's row), by `model`'s estimates. Speedups
    are over the reference, priced as its source runs it (`emitted.written_model`: the same price as
    any graph's, but for the older `emitted-v2-torch-norms`, kept so its stores rank as they did)."""
    ref_graph, ref_layout = reference
    written = written_model(model)
    base = written.price(ref_graph, ref_layout.layouts, profile)
    ref_row = ranking_row("reference", ref_graph, ref_layout, profile, base, written)
    rows = [ranking_row(d, g, lay, profile, base, model) for d, (g, lay) in candidates.items()]
    rows.sort(
        key=lambda r: (
            not r["fits"],
            r["estimated_seconds"],
            r["roofline_seconds"],
            r["no_overlap_seconds"],
            r["layout_cost"],
            r["digest"],
        )
    )
    mark_near_ties(rows)
    return rows, ref_row


TIE_TERMS = (
    "emitted_spill_bytes",
    "emitted_waves",
    "emitted_resident",
    "emitted_iterations",
    "emitted_launches",
    "roofline_seconds",
    "no_overlap_seconds",
    "layout_cost",
)


def mark_near_ties(rows: list[RankRow]) -> None:
    """Mark each row whose estimate is within MODEL_ERROR of the next row's (`near_tie`), naming the
    first term that separates the two (`tie_break`: spilled registers, waves, resident programs per
    SM, for-loop iterations, launches, then the roofline's terms and the layout cost) and its two
    values (`tie_values`)."""
    for a, b in pairwise(rows):
        if b["estimated_seconds"] <= a["estimated_seconds"] * (1 + MODEL_ERROR):
            a["near_tie"] = b["digest"]
            ka, kb = cast(Mapping[str, Any], a), cast(Mapping[str, Any], b)  # TIE_TERMS are RankRow keys
            term = next((t for t in TIE_TERMS if ka.get(t) != kb.get(t)), "digest")
            a["tie_break"], a["tie_values"] = term, [ka[term], kb[term]]


def confident(row: RankRow, reference_row: RankRow) -> bool:
    """Whether `row` is estimated faster than the reference by more than the model's measured error,
    and its tiles fit the register file with that error to spare. Spills are the term the model prices
    least surely: of the two spilling μGraphs measured on an H100, one ran in two thirds of its
    estimate, the other in four times it. A kept reference runs as its source does (a PyTorch model's
    norm with its weight and bias one call, in the model and in the module), so its price is the bar."""
    return (
        bool(row["fits"])
        and not row.get("emitted_spill_bytes")
        and row.get("emitted_registers", 0) * (1 + MODEL_ERROR) <= MAX_REGISTERS
        and row["estimated_seconds"] * (1 + MODEL_ERROR) < reference_row["estimated_seconds"]
    )


def combined(rows: Sequence[RankRow], reference_row: RankRow) -> list[RankedRow]:
    """Candidates and the reference in one order (the reference flagged), best first. The reference
    comes before every candidate not confidently faster than it (`confident`), since replacing it
    would gain nothing the model can vouch for; such candidates keep their order after it."""
    flagged = [cast(RankedRow, {**r, "reference": False, "confident": confident(r, reference_row)}) for r in rows]
    ref = cast(RankedRow, {**reference_row, "reference": True, "confident": True})
    ahead = [r for r in flagged if r["confident"]]
    behind = [r for r in flagged if not r["confident"]]
    return (
        sorted(ahead, key=lambda r: (not r["fits"], r["estimated_seconds"]))
        + [ref]
        + sorted(behind, key=lambda r: (not r["fits"], r["estimated_seconds"]))
    )


def rerank(
    stored: Sequence[RankedRow],
    graphs: Mapping[str, KernelGraph],
    profile: GpuProfile,
    model: CostModel | None = None,
) -> list[RankedRow]:
    """A stored combined ranking again under another profile (or model; default: the one its rows name),
    from the layouts its rows keep (no solver needed). `graphs` maps each row's digest to its graph."""

    def result(row: RankedRow) -> LayoutResult:
        return LayoutResult(Layouts.from_json(row["layouts"]), dict(row["layout_terms"]), int(row["layout_cost"]), 0.0)

    ref = next(r for r in stored if r.get("reference"))
    model = model or model_named(ref.get("model"))
    candidates = {r["digest"]: (graphs[r["digest"]], result(r)) for r in stored if not r.get("reference")}
    rows, ref_row = rank(candidates, (graphs[ref["digest"]], result(ref)), profile, model)
    ref_row["digest"] = ref["digest"]
    return combined(rows, ref_row)


def measured_first(ordered: Sequence[RankedRow], measurements: Mapping[str, Mapping[str, Any]]) -> list[RankedRow]:
    """A combined ranking with GPU measurements applied: rows timed on a GPU (with outputs that matched
    the reference) come first, fastest first, each with its measured time, device and measured speedup
    over the reference; the other rows follow in the model's order. A failed or wrong measurement is
    kept on its row as `measure_error` and does not move it. `measurements` are the run store's
    records, by digest (codegen.timing's fields, or `error`)."""
    ref = next((r["digest"] for r in ordered if r.get("reference")), None)
    ref_m = measurements.get(ref) if ref is not None else None
    ref_seconds = ref_m.get("median_seconds") if ref_m and ref_m.get("ok") else None
    rows: list[RankedRow] = []
    for r in ordered:
        row = cast(RankedRow, {k: v for k, v in r.items() if not k.startswith("measure")})
        m = measurements.get(r["digest"])
        if m is not None and m.get("ok") and m.get("median_seconds"):
            row["measured_seconds"] = float(m["median_seconds"])
            row["measured_device"] = m.get("device")
            row["measured_speedup"] = ref_seconds / float(m["median_seconds"]) if ref_seconds else None
        elif m is not None:
            row["measure_error"] = m.get("error") or f"outputs off by {m.get('max_rel_err')} (relative)"
        rows.append(row)
    timed = sorted(
        (r for r in rows if "measured_seconds" in r),
        key=lambda r: (r["measured_seconds"], not r.get("reference"), r["digest"]),
    )
    return timed + [r for r in rows if "measured_seconds" not in r]
