"""The end of a run, once every task is done or the time limit has passed.

Each fragment's confirmed μGraphs are ranked by the roofline estimate of a GPU profile under their
layouts (stages.layout) — and, with `measure`, the model's best of each are timed as Triton kernels on
a GPU worker and ranked by measured time (pipeline.measuring) — the best of each fragment is stitched
into one program, and that program is checked end to end in float64 before the final record is
written: a stitched program that differs from the reference is a bug, never a result.
"""

from __future__ import annotations

import time

import numpy as np

from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import KernelGraph
from mugraph.ir.serialize import dumps, loads
from mugraph.pipeline.commit import Results
from mugraph.pipeline.dispatch import Dispatch
from mugraph.pipeline.events import DoneEvent
from mugraph.pipeline.measuring import measure_fragment
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


def finish(
    results: Results, dispatch: Dispatch, *, complete: bool, measure: int, deadline: float | None, t0: float
) -> DoneEvent:
    """Rank, stitch, check and record the run's result; the `done` event. `measure` times that many
    of each fragment's best on a GPU worker (a complete run only), and stops at `deadline`."""
    plan, store, profile = results.plan, results.store, results.profile
    chosen: dict[str, KernelGraph] = {}
    best_per_fragment: dict[str, str] = {}
    mugraphs: list[str] = []
    rankings: dict[str, list[RankedRow]] = {}
    references: dict[str, RankedRow] = {}
    unlaid: dict[str, list[str]] = {}
    for i, fp in enumerate(plan.fragments):
        ok = {
            d: loads(results.found[i][d].graph)
            for d, r in sorted(results.confirmed[i].items())
            if r["equivalent"] and d in results.found[i]
        }
        mugraphs.extend(ok)
        ref_digest = canonical_digest(fp.spec.graph)
        laid = {d: (g, _layout_of(results, dispatch, i, d, g)) for d, g in ok.items()}
        candidates = {d: (g, lay) for d, (g, lay) in laid.items() if lay is not None}
        unlaid[fp.spec.name] = sorted(d for d, (_, lay) in laid.items() if lay is None)
        ref_layout = _reference_layout(results, i)
        rows, ref_row = rank(candidates, (fp.spec.graph, ref_layout), profile)
        ref_row["digest"] = ref_digest
        ordered = ranked_rows(combined(rows, ref_row))
        if complete and measure:
            graphs = {**ok, ref_digest: fp.spec.graph}
            inner = {d: list(lay.layouts.kernel) for d, (_, lay) in candidates.items()}
            inner[ref_digest] = list(ref_layout.layouts.kernel)
            ordered = measure_fragment(
                dispatch.client,
                store,
                i,
                fp,
                ordered,
                graphs,
                inner,
                measure,
                results.measured[i],
                deadline,
                results.on_event,
            )
        else:
            ordered = ranked_rows(measured_first(ordered, results.measured[i]))
        store.put_ranking(i, ordered)
        rankings[fp.spec.name] = [r for r in ordered if not r["reference"]]
        references[fp.spec.name] = next(r for r in ordered if r["reference"])
        best_per_fragment[fp.spec.name] = ordered[0]["digest"]
        if not ordered[0]["reference"]:
            chosen[fp.spec.name] = ok[ordered[0]["digest"]]
    stitched = stitch(plan.split, chosen)
    n_out = len(plan.reference.output_tensors)
    err = float_max_rel_err(plan.reference, stitched, list(range(n_out)), np)
    if not err <= END_TO_END_TOLERANCE:
        raise MugraphError(
            f"the stitched program differs from {plan.program.name} in float64 "
            f"(relative error {err:.3g}); this is a bug, please report it"
        )
    best = best_per_fragment[plan.fragments[0].spec.name] if len(plan.fragments) == 1 else canonical_digest(stitched)
    summary = store.task_summary()
    final: FinalRecord = {
        "complete": complete,
        "best": best,
        "best_per_fragment": best_per_fragment,
        "program_graph": dumps(stitched),
        "end_to_end_max_rel_err": err,
        "mugraphs": sorted(mugraphs),
        "gpu_profile": profile.name,
        "measured": {fp.spec.name: len(m) for fp, m in zip(plan.fragments, results.measured, strict=True) if m},
    }
    store.put_final(final)
    totals = results.totals
    c = totals.counters
    busy = totals.busy
    done: DoneEvent = {
        "event": "done",
        "store": str(store.path),
        "program": plan.program.name,
        "complete": complete,
        "mugraphs": sorted(mugraphs),
        "best": best,
        "best_per_fragment": best_per_fragment,
        "ranking": rankings,
        "reference": references,
        "gpu_profile": profile.name,
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
        "no_layout": {name: ds for name, ds in unlaid.items() if ds},
        "end_to_end_max_rel_err": err,
        "tasks_run": totals.tasks_run,
        "confirms_run": totals.confirms_run,
        "layouts_run": totals.layouts_run,
        "tasks_done": summary["done"],
        "tasks_pending": summary["pending"],
        "states": c.nodes,
        "solver_calls": c.solver_calls,
        "memo": dict(totals.memo),
        "worker_busy_seconds": {w: round(s, 3) for w, s in sorted(busy.items())},
        "worker_peak_rss_mib": {w: round(m, 1) for w, m in sorted(totals.peak_rss_mib.items())},
        "driver_peak_rss_mib": round(peak_rss_mib(), 1),
        "store_bytes": store.size_bytes(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return done
