"""The end of a run, once every task is done or the time limit has passed.

Each fragment's confirmed μGraphs are ranked by the roofline estimate of a GPU profile under their
layouts (stages.layout) — and, with `measure`, the model's best of each are timed as Triton kernels on
a GPU worker and ranked by measured time (pipeline.measuring) — the best of each fragment is stitched
into one program, and that program is checked end to end in float64 before the final record is
written: a stitched program that differs from the reference is a bug, never a result.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, loads
from mugraph.pipeline.commit import Results
from mugraph.pipeline.dispatch import Dispatch
from mugraph.pipeline.events import DoneEvent, Reranked
from mugraph.pipeline.measuring import measure_fragment
from mugraph.pipeline.plan import RunPlan
from mugraph.pipeline.worker import peak_rss_mib
from mugraph.stages.combine import stitch
from mugraph.stages.layout.choose import LayoutResult, choose_layouts
from mugraph.stages.layout.facts import LayoutError
from mugraph.stages.layout.rank import combined, measured_first, rank
from mugraph.stages.layout.rows import RankedRow, ranked_rows
from mugraph.stages.verify.check import float_max_rel_err
from mugraph.storage.run.run_records import FinalRecord

__all__ = ["END_TO_END_TOLERANCE", "finish"]

END_TO_END_TOLERANCE = 1e-6


def _layout_of(
    results: Results, dispatch: Dispatch, fragment: int, digest: str, graph: KernelGraph
) -> LayoutResult | None:
    """The stored layouts, or (a run stopped before its layout task ran) solved here and stored;
    None when no layout satisfies the user's strides."""
    if not results.layout_current(fragment, digest):
        rec = dispatch.layout_fn(digest, dumps(graph), results.io[fragment])
        results.store.put_layout(fragment, digest, rec)
        results.layouts[fragment][digest] = rec
    rec = results.layouts[fragment][digest]
    return None if "error" in rec else LayoutResult.from_json(rec)


def _reference_layout(results: Results, fragment: int) -> LayoutResult:
    fp = results.plan.fragments[fragment]
    try:
        return choose_layouts(fp.spec.graph, results.io[fragment])
    except LayoutError as e:
        raise MugraphError(
            f"{fp.spec.name}: the reference program itself has no layout with the strides "
            f"given by --layout ({e}); drop or change them"
        ) from None


@dataclass
class _Fragment:
    """One fragment's end: its μGraphs confirmed equal to the reference (by digest), its ranking with
    the reference's row in it, and the confirmed μGraphs no layout fits."""

    name: str
    confirmed: dict[str, KernelGraph]
    ordered: list[RankedRow]
    unlaid: list[str]
    reranked: Reranked | None = None

    @property
    def best(self) -> RankedRow:
        return self.ordered[0]

    @property
    def ranking(self) -> list[RankedRow]:
        """The candidates' rows, the reference's left out."""
        return [r for r in self.ordered if not r["reference"]]

    @property
    def reference(self) -> RankedRow:
        return next(r for r in self.ordered if r["reference"])


def _confirmed(results: Results, fragment: int) -> dict[str, KernelGraph]:
    """The fragment's found μGraphs that confirmation found equal to its reference, by digest."""
    return {
        d: loads(results.found[fragment][d].graph)
        for d, r in sorted(results.confirmed[fragment].items())
        if r["equivalent"] and d in results.found[fragment]
    }


def _ranked(
    results: Results,
    dispatch: Dispatch,
    fragment: int,
    confirmed: dict[str, KernelGraph],
    *,
    measured: bool,
    measure: int,
    deadline: float | None,
) -> _Fragment:
    """Lay out the fragment's confirmed μGraphs (those no layout fits are left out), rank them with the
    reference by the profile's estimate, and, where `measured`, time the best `measure` on a GPU worker;
    else rows measured by an earlier invocation still go first. The ranking is stored."""
    fp = results.plan.fragments[fragment]
    ref_digest = canonical_digest(fp.spec.graph)
    laid = {d: (g, _layout_of(results, dispatch, fragment, d, g)) for d, g in confirmed.items()}
    candidates = {d: (g, lay) for d, (g, lay) in laid.items() if lay is not None}
    unlaid = sorted(d for d, (_, lay) in laid.items() if lay is None)
    ref_layout = _reference_layout(results, fragment)
    rows, ref_row = rank(candidates, (fp.spec.graph, ref_layout), results.profile, results.cost_model)
    ref_row["digest"] = ref_digest
    ordered = ranked_rows(combined(rows, ref_row))
    if measured:
        graphs = {**confirmed, ref_digest: fp.spec.graph}
        inner = {d: list(lay.layouts.kernel) for d, (_, lay) in candidates.items()}
        inner[ref_digest] = list(ref_layout.layouts.kernel)
        ordered = measure_fragment(
            dispatch.client,
            results.store,
            fragment,
            fp,
            ordered,
            graphs,
            inner,
            measure,
            results.measured[fragment],
            deadline,
            results.on_event,
        )
    else:
        ordered = ranked_rows(measured_first(ordered, results.measured[fragment]))
    reranked = _changed_model(results.store.ranking(fragment), ordered)
    results.store.put_ranking(fragment, ordered)
    return _Fragment(fp.spec.name, confirmed, ordered, unlaid, reranked)


def _changed_model(before: Sequence[Mapping[str, Any]] | None, now: list[RankedRow]) -> Reranked | None:
    """Where the store's ranking was made by another cost model (an earlier version's) and the choice
    differs now: what was chosen, so that the run says its answer changed rather than changing it
    silently. A ranking by the same model that grew with the search is no news."""
    if not before or not now or before[0].get("model") in (None, now[0].get("model")):
        return None
    if before[0].get("digest") == now[0]["digest"]:
        return None
    was = before[0]
    return {"was_model": str(was["model"]), "was": str(was["digest"]), "was_reference": bool(was.get("reference"))}


def _stitched(plan: RunPlan, fragments: list[_Fragment]) -> tuple[KernelGraph, float]:
    """Each fragment's best μGraph (or its reference) stitched into one program, and that program's
    largest relative error against the reference in float64: over the tolerance is a bug."""
    chosen = {f.name: f.confirmed[f.best["digest"]] for f in fragments if not f.best["reference"]}
    stitched = stitch(plan.split, chosen)
    n_out = len(plan.reference.output_tensors)
    err = float_max_rel_err(plan.reference, stitched, list(range(n_out)), np)
    if not err <= END_TO_END_TOLERANCE:
        raise MugraphError(
            f"the stitched program differs from {plan.program.name} in float64 "
            f"(relative error {err:.3g}); this is a bug, please report it"
        )
    return stitched, err


def _final_record(
    results: Results, fragments: list[_Fragment], stitched: KernelGraph, err: float, complete: bool
) -> FinalRecord:
    """The run's result as the store keeps it: one fragment's best digest names the run's best, several
    name it by the stitched program's digest."""
    best_per_fragment = {f.name: f.best["digest"] for f in fragments}
    best = fragments[0].best["digest"] if len(fragments) == 1 else canonical_digest(stitched)
    return {
        "complete": complete,
        "best": best,
        "best_per_fragment": best_per_fragment,
        "program_graph": dumps(stitched),
        "end_to_end_max_rel_err": err,
        "mugraphs": sorted(d for f in fragments for d in f.confirmed),
        "gpu_profile": results.profile.name,
        "measured": {fp.spec.name: len(m) for fp, m in zip(results.plan.fragments, results.measured, strict=True) if m},
    }


def _done_event(results: Results, fragments: list[_Fragment], final: FinalRecord, t0: float) -> DoneEvent:
    """The `done` event: the final record with each fragment's ranking, and what this invocation did."""
    plan, store, totals = results.plan, results.store, results.totals
    summary = store.task_summary()
    rankings = {f.name: f.ranking for f in fragments}
    references = {f.name: f.reference for f in fragments}
    best_per_fragment = final["best_per_fragment"]
    done: DoneEvent = {
        "event": "done",
        "store": str(store.path),
        "program": plan.program.name,
        "complete": final["complete"],
        "mugraphs": list(final["mugraphs"]),
        "best": final["best"],
        "best_per_fragment": best_per_fragment,
        "ranking": rankings,
        "reference": references,
        "gpu_profile": final["gpu_profile"],
        "measured": final["measured"],
        # fragments where a candidate is estimated faster, but not by more than the model's error
        "not_confident": sorted(
            n
            for n, r in rankings.items()
            if r
            and best_per_fragment[n] == references[n]["digest"]
            and r[0]["estimated_seconds"] < references[n]["estimated_seconds"]
        ),
        "io_layouts": {fp.spec.name: io for fp, io in zip(plan.fragments, results.io, strict=True) if io},
        "no_layout": {f.name: f.unlaid for f in fragments if f.unlaid},
        "end_to_end_max_rel_err": final["end_to_end_max_rel_err"],
        "tasks_run": totals.tasks_run,
        "confirms_run": totals.confirms_run,
        "layouts_run": totals.layouts_run,
        "tasks_done": summary["done"],
        "tasks_pending": summary["pending"],
        "states": totals.counters.nodes,
        "solver_calls": totals.counters.solver_calls,
        "memo": dict(totals.memo),
        "worker_busy_seconds": {w: round(s, 3) for w, s in sorted(totals.busy.items())},
        "worker_peak_rss_mib": {w: round(m, 1) for w, m in sorted(totals.peak_rss_mib.items())},
        "driver_peak_rss_mib": round(peak_rss_mib(), 1),
        "store_bytes": store.size_bytes(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    reranked = {f.name: f.reranked for f in fragments if f.reranked}
    if reranked:
        done["reranked"] = reranked
    return done


def finish(
    results: Results, dispatch: Dispatch, *, complete: bool, measure: int, deadline: float | None, t0: float
) -> DoneEvent:
    """Rank, stitch, check and record the run's result; the `done` event. `measure` times that many
    of each fragment's best on a GPU worker (a complete run only), and stops at `deadline`."""
    fragments = [
        _ranked(
            results,
            dispatch,
            i,
            _confirmed(results, i),
            measured=bool(complete and measure),
            measure=measure,
            deadline=deadline,
        )
        for i in range(len(results.plan.fragments))
    ]
    stitched, err = _stitched(results.plan, fragments)
    final = _final_record(results, fragments, stitched, err, complete)
    results.store.put_final(final)
    return _done_event(results, fragments, final, t0)
