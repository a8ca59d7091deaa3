"""What a run's reader wants first, shared by the report and `mugraph show`: the answer (best μGraph
against the reference program) in one headline, the ranking rows to show (the reference's always
among them), and what each search counter means."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, TypeVar

from mugraph.ir.serialize import loads
from mugraph.ir.together import outside_words, speedup_text, summed
from mugraph.ir.types import NON_LAX_OPS
from mugraph.stages.layout.describe import explain, seconds_text, what_runs
from mugraph.stages.layout.rank import MODEL_ERROR
from mugraph.stages.layout.residency import MAX_REGISTERS

Row = TypeVar("Row", bound=Mapping[str, Any])  # a ranking row: rows.RankedRow, or the plain dict a caller holds

# The order the ranking breaks equal estimates in (stages.layout.rank).
TIE_BREAKS = "no-overlap time, then layout cost, then digest"

COUNTER_MEANINGS: dict[str, str] = {
    "nodes": "search states expanded (a block structure node counts once per instantiation it carries)",
    "structures": "nodes of the search tree expanded (one per block structure, whatever its instantiations)",
    "kernel_nodes": "states at the kernel level (no block graph open)",
    "block_nodes": "states inside an open block graph",
    "children": "children listed (canonical order, shape and memory checks passed; block ops whose terms the oracle "
    "pruned are left out of the block op tables); a barren node lists none",
    "pruned": "listed children not explored: ruled out by counting or by the abstract-expression oracle",
    "candidates": "complete kernel graphs with as many unused tensors as the reference has outputs",
    "fingerprints": "candidates whose output shapes and terms matched, fingerprinted in Z_pq",
    "fingerprint_seconds": "seconds spent fingerprinting candidates",
    "verified": "fingerprint matches (before duplicates were merged)",
    "ir_rejects": "complete candidates the IR refused (a search bug if ever above 0)",
    "oracle_queries": "terms sent to the oracle (one per new tensor of a listed child)",
    "prefiltered": "oracle queries answered by the finite models or cheap structural checks",
    "memo_hits": "oracle queries answered by the verdict memo (local LRU or Redis)",
    "solver_calls": "oracle queries decided by the solver (normal forms by default, Z3 at oracle=z3)",
    "solver_seconds": "seconds inside the solver",
    "undecided_kept": "verdicts left undecided and kept (a normal form past its size budget)",
    "undecided_pruned": "verdicts left undecided and pruned (Z3 unknowns at oracle=z3 with unknown_keeps=false)",
    "seconds": "seconds inside search tasks, summed over workers",
}


class Headline(TypedDict):
    """One fragment's answer: its best row against the reference's, and why (see `headline`)."""

    best: str
    best_is_reference: bool
    seconds: float
    reference_seconds: float
    timing: str  # "estimated on <profile>" or "measured on <device>"
    speedup: float
    kernels: int
    reference_kernels: int
    dram_bytes: int
    reference_dram_bytes: int
    reference_rank: int
    ranked: int
    ties: int
    why: str
    line: str
    runner_up: str | None  # the fastest μGraph when the reference was kept within the model's error
    tie_note: str


class SizeCheckpoint(TypedDict):
    share: float  # of the run time
    elapsed: float
    estimated_states: int
    error: float  # relative to the states the complete run explored


class SizeRecord(TypedDict):
    """The space-size estimate of a run (see `size_record`)."""

    states: int
    estimated_states: int
    eta_seconds: float | None
    complete: bool
    checkpoints: list[SizeCheckpoint]


def memo_text(local: float | None, shared: float | None) -> str:
    """The memo's hit rate for the progress line: the shared memo's (Redis) share of the oracle's
    lookups, which is what workers and earlier runs save each other. The per-process LRU's share is
    shown only when it is above zero: each oracle settles a term once, so it seldom is."""
    if local is None or shared is None:
        return "n/a"
    text = f"{100 * shared:.0f}%"
    return text + (f" (+{100 * local:.0f}% in-process)" if round(100 * local) > 0 else "")


def reference_row(ranking: Sequence[Row]) -> tuple[int, Row] | None:
    """(1-based rank, row) of the reference program in a ranking."""
    return next(((n, r) for n, r in enumerate(ranking, 1) if r.get("reference")), None)


def rows_to_show(ranking: Sequence[Row], limit: int | None) -> list[tuple[int, Row]]:
    """The first `limit` rows with their ranks, and the reference's row after them when the limit
    cuts it off (it is what every speedup is measured against)."""
    rows = list(enumerate(ranking, 1))
    if limit is None or len(rows) <= limit:
        return rows
    shown = rows[:limit]
    ref = reference_row(ranking)
    if ref is not None and ref[0] > limit:
        shown.append(ref)
    return shown


def held_back_reason(row: Mapping[str, Any]) -> str:
    """Why a candidate estimated faster than the reference is not a confident choice, by the rules of
    stages.layout.rank.confident, the surest first: its tiles do not fit, spill registers, or come
    within the model's error of spilling (the term the model prices least surely); only then is it
    estimated faster by no more than the model's measured error."""
    if not row.get("fits", True):
        return "its tiles do not fit the GPU's memory"
    if row.get("emitted_spill_bytes"):
        return (
            f"its tiles spill {row['emitted_spill_bytes']:,} bytes of registers per program, which the model "
            f"prices least surely"
        )
    if row.get("emitted_registers", 0) * (1 + MODEL_ERROR) > MAX_REGISTERS:
        return (
            f"its tiles need {row['emitted_registers']} of the {MAX_REGISTERS} registers per thread, within "
            f"the model's error ({MODEL_ERROR:.0%}) of spilling"
        )
    return f"within the model's measured error ({MODEL_ERROR:.0%})"


def row_seconds(row: Mapping[str, Any]) -> tuple[float, str]:
    """A ranking row's time (the GPU's where it was measured, else the model's) and what it is."""
    if row.get("measured_seconds") is not None:
        return float(row["measured_seconds"]), f"measured on {row.get('measured_device', 'a GPU')}"
    return float(row["estimated_seconds"]), f"estimated on {row.get('profile', '-')}"


def headline(ranking: Sequence[Mapping[str, Any]]) -> Headline | None:
    """The answer for one fragment: best row against the reference, as numbers and one line."""
    if not ranking:
        return None
    best = ranking[0]
    ref = reference_row(ranking)
    if ref is None:
        return None
    ref_row = ref[1]
    t_best, how = row_seconds(best)
    t_ref, _ = row_seconds(ref_row)
    speedup = t_ref / t_best if t_best > 0 else 0.0
    ties = sum(
        1
        for r in ranking
        if r.get("fits", True) == best.get("fits", True) and r["estimated_seconds"] == best["estimated_seconds"]
    )
    is_ref = bool(best.get("reference"))
    # the fastest μGraph other than the reference's own graph (the search finds that one too)
    runner = next((r for r in ranking if r["digest"] != ref_row["digest"]), None) if is_ref else None
    kept = fastest = ""
    if runner is not None and row_seconds(runner)[0] < t_ref:
        faster = speedup_text(t_ref / row_seconds(runner)[0])
        kept = (
            f"; the fastest μGraph, {runner['digest'][:16]}, is estimated {faster}, "
            f"{held_back_reason(runner)}, so the reference is kept"
        )
    elif runner is not None:  # none beats it: the closest, so that the answer names what was found
        t_run = row_seconds(runner)[0]
        fastest = f"; the fastest μGraph, {runner['digest'][:16]}, is estimated {seconds_text(t_run)}" + (
            f" ({t_ref / t_run:.2f}x)" if t_run > 0 else ""
        )
    what = (
        ("the reference program itself" + (" (no μGraph beats it)" if not kept else ""))
        if is_ref
        else f"μGraph {best['digest'][:16]}"
    )
    line = (
        f"best is {what}: {seconds_text(t_best)} against {seconds_text(t_ref)} for the reference "
        f"({how}), {speedup_text(speedup)}; {what_runs(best)} against {what_runs(ref_row)}, DRAM "
        f"{best['dram_bytes']:,} B against {ref_row['dram_bytes']:,} B{kept}{fastest}"
    )
    return {
        "best": best["digest"],
        "best_is_reference": is_ref,
        "seconds": t_best,
        "reference_seconds": t_ref,
        "timing": how,
        "speedup": speedup,
        "kernels": best["kernels"],
        "reference_kernels": ref_row["kernels"],
        "dram_bytes": best["dram_bytes"],
        "reference_dram_bytes": ref_row["dram_bytes"],
        "reference_rank": ref[0],
        "ranked": len(ranking),
        "ties": ties,
        "why": "" if is_ref else explain(best, ref_row),
        "line": line,
        "runner_up": runner["digest"] if runner is not None and kept else None,
        "tie_note": (
            f"{ties} μGraphs share the best estimated time; they are ordered by {TIE_BREAKS}" if ties > 1 else ""
        ),
    }


def best_so_far(
    samples: Sequence[Mapping[str, Any]],
    fragment: str,
    found_order: Sequence[str],
    ranking: Sequence[Mapping[str, Any]],
    found_at: Mapping[str, float] | None = None,
) -> list[tuple[float, float]]:
    """(run time, speedup over the reference) of the best ranked μGraph found by then, for one fragment.

    With `found_at` (each found μGraph's run seconds at its find, as the store keeps them) the curve
    is exact: a point at each find of a ranked μGraph, and one at the run's last sample. Without
    (a store from before find times were kept, or one lacking a time), a sample counts the
    fragment's μGraphs found so far; they are taken in `found_order` (the order of the tasks that
    found them, which is close to, not exactly, the order they came in). μGraphs are scored by the
    final ranking's time; points start once a ranked μGraph is among them."""
    ref = reference_row(ranking)
    if ref is None:
        return []
    t_ref = row_seconds(ref[1])[0]
    times = {r["digest"]: row_seconds(r)[0] for r in ranking if not r.get("reference")}
    if found_at is not None and all(d in found_at for d in found_order):
        return _exact_best_so_far(samples, found_order, found_at, times, t_ref)
    out: list[tuple[float, float]] = []
    best, taken = math.inf, 0
    for s in samples:
        per = s.get("fragments", {}).get(fragment)
        if per is None:
            continue
        count = int(per.get("mugraphs", 0))
        for digest in found_order[taken:count]:
            best = min(best, times.get(digest, math.inf))
        taken = max(taken, count)
        if math.isfinite(best) and best > 0:
            out.append((float(s["elapsed"]), t_ref / best))
    return out


def _exact_best_so_far(
    samples: Sequence[Mapping[str, Any]],
    found: Sequence[str],
    found_at: Mapping[str, float],
    times: Mapping[str, float],
    t_ref: float,
) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    best = math.inf
    for digest in sorted(found, key=lambda d: (found_at[d], d)):
        best = min(best, times.get(digest, math.inf))
        if math.isfinite(best) and best > 0:
            out.append((float(found_at[digest]), t_ref / best))
    end = float(samples[-1]["elapsed"]) if samples else None
    if out and end is not None and end > out[-1][0]:
        out.append((end, out[-1][1]))
    return out


def size_record(samples: Sequence[Mapping[str, Any]], complete: bool, done_states: int = 0) -> SizeRecord | None:
    """The space-size estimate from a run's progress samples (`elapsed` run time, `states`,
    `estimated_states`): the latest, and for a complete run the estimate against the actual size
    at 10%, 25%, 50% and 90% of the run time. `done_states`: the done tasks' states, exact, which
    are ahead of the last sample written where a run is still going."""
    est = [s for s in samples if s.get("estimated_states") is not None]
    if not est:
        return None
    last = est[-1]
    states, estimated = states_so_far(int(samples[-1]["states"]), int(last["estimated_states"]), done_states)
    out: SizeRecord = {
        "states": states,
        "estimated_states": estimated,
        "eta_seconds": last.get("eta_seconds"),
        "complete": complete,
        "checkpoints": [],
    }
    if complete and states > 0:
        span = float(samples[-1]["elapsed"])
        for share in (0.1, 0.25, 0.5, 0.9):
            at = next((s for s in est if float(s["elapsed"]) >= share * span), est[-1])
            out["checkpoints"].append(
                {
                    "share": share,
                    "elapsed": at["elapsed"],
                    "estimated_states": int(at["estimated_states"]),
                    "error": abs(int(at["estimated_states"]) - states) / states,
                }
            )
    return out


def states_so_far(sampled: int, estimated: int, done_states: int) -> tuple[int, int]:
    """The states explored and the space's estimated size, where the done tasks' states (exact) may be
    ahead of the last sample written (beside a running search): the larger, and an estimate no smaller."""
    states = max(sampled, done_states)
    return states, max(estimated, states)


def size_line(size: SizeRecord | None) -> str:
    """One line: the run's size so far and the estimate (and, once complete, how good it was)."""
    if size is None:
        return "size of the space: not estimated"
    states, total = size["states"], size["estimated_states"]
    if not size["complete"]:
        eta = size.get("eta_seconds")
        left = f", about {duration_text(eta)} left at the last rate" if eta is not None else ""
        return (
            f"search not complete: {states:,} states explored of about {count_text(total)} estimated "
            f"({100 * states / total if total else 100:.0f}%){left}"
        )
    checks = "; ".join(
        f"{c['estimated_states']:,} at {100 * c['share']:.0f}% of the run time ({100 * c['error']:.0f}% off)"
        for c in size["checkpoints"]
    )
    return f"search complete: {states:,} states; the size estimate (Knuth probes) was {checks}"


def eta_rate(sample: Mapping[str, Any]) -> float:
    """The states per second an ETA is reckoned at: the rate since the invocation's first states
    (0.0, unknown, before there is one); a sample written before that rate was kept, its average."""
    if "states_per_s_searching" in sample:
        return float(sample["states_per_s_searching"] or 0.0)
    return float(sample.get("states_per_s") or 0.0)


def run_rate(timeline: Sequence[Sequence[Mapping[str, Any]]]) -> float:
    """The states per second of a run's invocations together: each one's rate (`eta_rate` of its last
    sample) weighed by its seconds, so that a short invocation (a resume's first seconds are its
    slowest: searchers built, caches cold) does not set a stopped run's ETA alone."""
    weighed = [(eta_rate(inv[-1]), float(inv[-1].get("seconds") or 0.0)) for inv in timeline if inv]
    seconds = sum(t for r, t in weighed if r > 0)
    return sum(r * t for r, t in weighed if r > 0) / seconds if seconds > 0 else 0.0


def eta_text(states: float, estimated: float | None, pending_tasks: int, states_per_s: float) -> str:
    """`about 1.2 M states, 34% done, ETA 5 min` (or what of it is known)."""
    if estimated is None:
        return "not estimated yet"
    total = max(float(estimated), float(states))
    if pending_tasks == 0:
        left = "done"
    elif states_per_s > 0:
        left = f"ETA {duration_text((total - states) / states_per_s)}"
    else:
        left = "ETA unknown"
    return f"about {count_text(total)} states, {100 * states / total if total else 100:.0f}% done, {left}"


def count_text(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:,.0f}"


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def stored_together(
    final: Mapping[str, Any] | None, rankings: Mapping[str, Sequence[Mapping[str, Any]]], from_torch: bool
) -> str | None:
    """The fragments priced together as a store's reader (`show`, the report) gives them: each fragment's
    reference and the μGraph the run chose (`final`'s) from its ranking rows, summed; the ops no
    fragment holds named as the store knows them (PyTorch's glue by kind only; the ops copied as written
    between fragments, from the stitched program). None for one fragment, or before the run chose."""
    if final is None:
        return None
    figure = summed(rankings, final["best_per_fragment"])
    if figure is None:
        return None
    between = [op.kind.value for op in loads(final["program_graph"]).ops if op.kind in NON_LAX_OPS]
    return figure.line(outside_words(None, between, from_torch))
