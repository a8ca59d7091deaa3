"""The text a run prints on the console: its start line, its progress line (with the ETA) and its final
verdict. `mugraph optimize` and `mugraph.optimize` print the same lines, so both take them from here.

The functions read the pipeline's events as plain mappings (the `start`, `progress` and `done` events
of mugraph.pipeline.events), so this room needs nothing of the pipeline's but their field names.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from mugraph.dashboards.summary import eta_rate, eta_text, held_back_reason, memo_text
from mugraph.ir.plural import counted
from mugraph.ir.together import OUTSIDE, speedup_text, summed
from mugraph.stages.layout.describe import seconds_text, what_runs
from mugraph.stages.layout.rows import RankRow
from mugraph.storage.memo.layered import UNAVAILABLE


def start_line(e: Mapping[str, Any]) -> str:
    """`mugraph: starting PROGRAM in STORE: ...` from a `start` event."""
    verb = "resuming" if e["resumed"] else "starting"
    presets = e.get("presets") or {}
    named = f" ({', '.join(f'{f} {presets[f]}' for f in e['fragments'])})" if len(e["fragments"]) > 1 else ""
    taken = f" (port {e['dashboard_taken']} was taken)" if e.get("dashboard_taken") else ""
    return (
        f"mugraph: {verb} {e['program']} in {e['store']}: {counted(len(e['fragments']), 'fragment')}{named}, "
        f"{counted(e['tasks_done'], 'task')} done, {e['tasks_pending']:,} pending; {counted(e['workers'], 'worker')}; "
        f"dashboard {e['dashboard'] or 'none'}{taken}, search page {e.get('live_page') or '-'}"
    ) + (NO_WORKERS if not e["workers"] else "")


# what the tasks do while the cluster has no worker, and what to do about it
WAIT_FOR_WORKERS = (
    "the tasks wait until one joins (start one with `dask worker SCHEDULER-ADDRESS`; --time-limit bounds the wait)"
)
# after the start line where the cluster (an external scheduler) has no worker yet: nothing would run
NO_WORKERS = f"\nmugraph: the scheduler has no workers yet: {WAIT_FOR_WORKERS}"


def workers_line(e: Mapping[str, Any]) -> str:
    """A `workers` event: every worker left in the middle of the run (nothing runs), or workers are
    back; each said once, as the start line says a cluster with none."""
    if not e["workers"]:
        return f"mugraph: warning: every worker has left the scheduler ({e['seconds']:.0f} s in): {WAIT_FOR_WORKERS}"
    return f"mugraph: {counted(e['workers'], 'worker')} joined; the tasks run again"


def memo_lost_line(e: Mapping[str, Any]) -> str:
    """A `memo_lost` event, in the words the worker's own warning uses (on a local cluster the driver's
    line is the only one; a `dask worker` says it in its log too). Where the memo was mugraph's own
    server and it died, why it died (`cause`), not the client's "Connection refused"."""
    if e.get("cause"):
        return f"mugraph: warning: {e['cause']} (worker {e['worker']} said: {e['error']})"
    return f"mugraph: warning: {UNAVAILABLE}: {e['error']} (worker {e['worker']}; the same results, found more slowly)"


def limit_line(e: Mapping[str, Any]) -> str:
    """What the run says the moment its `--time-limit` is reached (a `limit` event): the search is
    stopped (a task running then hands in what its walk had found), and how long the confirmations
    of what it found may still take before the summary."""
    cancelled = counted(e["cancelled"], "running or queued search task")
    checks = (
        f"confirming and laying out the μGraphs found ({counted(e['checks'], 'check')} left, up to "
        f"{e['drain_seconds']:.0f} s more), then ranking"
        if e["checks"]
        else "ranking what was confirmed"
    )
    return (
        f"mugraph: time limit reached ({e['time_limit']:g} s): search stopped, {cancelled} stopped (what "
        f"those running had found is kept; left pending for a resume); {checks}"
    )


def reused_line(program: str, store: str, fragments: int, tasks_done: int) -> str:
    """What a call prints in place of the start line when it finds the run's store finished."""
    return (
        f"mugraph: {program}: the finished store {store} holds this program and config "
        f"({counted(fragments, 'fragment')}, {counted(tasks_done, 'task')} done); reused, nothing searched"
    )


def progress_text(e: Mapping[str, Any]) -> str:
    """The progress line from a `progress` event."""
    memo = memo_text(e.get("memo_local_hit_rate"), e.get("memo_remote_hit_rate"))
    return (
        f"tasks {e['tasks_done']:,} done, {e['tasks_running']:,} running, {e['tasks_pending']:,} pending · "
        f"states {e['states']:,} "
        f"({e['states_per_s']:,.0f}/s) · μGraphs {e['mugraphs']} ({e['confirmed']} confirmed) · "
        f"shared memo hits {memo} · solver {e['solver_calls']:,} · {e['seconds']:,.0f} s" + size_text(e)
    )


def size_text(e: Mapping[str, Any]) -> str:
    """` · about N states, X% done, ETA T` from a progress event or sample that has the estimate."""
    if e.get("estimated_states") is None:
        return ""
    return " · " + eta_text(
        e["states"],
        e["estimated_states"],
        int(e.get("tasks_pending", 0)) + int(e.get("tasks_running", 0)),
        eta_rate(e),
    )


def measured_line(e: Mapping[str, Any]) -> str:
    """One `measured` event: a μGraph (or the reference) timed on a GPU worker."""
    what = "the reference" if e["reference"] else f"μGraph {e['digest'][:16]}"
    timed = (
        f"{seconds_text(e['median_seconds'])} on {e['device']}"
        if e.get("median_seconds") is not None
        else f"not timed ({e.get('error')})"
    )
    return (
        f"mugraph: {e['fragment']}: {what}: {timed} (model {seconds_text(e['estimated_seconds'])}"
        f"{'' if e.get('ok', True) else '; OUTPUTS DIFFER, not ranked by it'})"
    )


def why_not_confident(row: Mapping[str, Any]) -> str:
    """Why a candidate is not confidently faster than the reference: the report's and `show`'s reason."""
    return held_back_reason(row)


def not_confident_line(top: RankRow | Mapping[str, Any]) -> str:
    """Why the best candidate does not replace the reference."""
    return (
        f"    no μGraph is confidently faster than the reference: the best candidate, {top['digest'][:16]}, "
        f"is estimated {speedup_text(top['speedup'])}, {why_not_confident(top)}; the reference is kept"
    )


def chosen_row(done: Mapping[str, Any], fragment: str) -> Mapping[str, Any]:
    """The row a fragment's result runs: its best candidate, or the reference's."""
    ranking: list[Mapping[str, Any]] = done["ranking"][fragment]
    ref: Mapping[str, Any] = done["reference"][fragment]
    return ranking[0] if ranking and done["best_per_fragment"][fragment] != ref["digest"] else ref


def kept_reason(done: Mapping[str, Any], fragment: str) -> str | None:
    """Why a fragment keeps its reference (None where a μGraph replaces it)."""
    ranking = done["ranking"][fragment]
    if not chosen_row(done, fragment).get("reference"):
        return None
    if fragment in done.get("not_confident", ()):
        top = ranking[0]
        estimate = f"is estimated {speedup_text(top['speedup'])}, but {why_not_confident(top)}"
        return f"the best candidate, {top['digest'][:16]}, {estimate}"
    reference = done.get("reference", {}).get(fragment, {}).get("digest")
    others = [r for r in ranking if r["digest"] != reference]  # the reference's own graph is found too
    if not others:
        if done["complete"]:
            # the space holds none (a constant multiply with no weight to fold into is one such op:
            # the search has no scalar op to build it with)
            return "its whole search space holds no μGraph equal to it other than the reference itself"
        return "the search stopped at its time limit before finding any μGraph equal to it"
    best = others[0]
    return f"no μGraph found is estimated faster (the best, {best['digest'][:16]}, {speedup_text(best['speedup'])})"


def reranked_line(was: Mapping[str, Any], best: Mapping[str, Any]) -> str:
    """A fragment's choice that changed when a store ranked by an earlier cost model was ranked again."""
    before = "the reference" if was["was_reference"] else f"μGraph {str(was['was'])[:16]}"
    return (
        f"    ranked again by cost model {best.get('model', 'of this version')}: the store's ranking, by "
        f"{was['was_model']}, chose {before}"
    )


def together_line(done: Mapping[str, Any], outside: str = OUTSIDE) -> str | None:
    """The fragments priced together, from a `done` summary's rows (None for one fragment): what the
    per-fragment speedups come to, and what no fragment holds, not priced (`outside`, in
    `ir.together.outside_words`' words: "" where nothing is; by default, where the caller does not
    know, the words that name no op)."""
    rows = {name: [*ranking, done["reference"][name]] for name, ranking in done["ranking"].items()}
    figure = summed(rows, done["best_per_fragment"])
    return None if figure is None else figure.line(outside)


def _states_and_calls(done: Mapping[str, Any]) -> str:
    return f"{counted(done['states'], 'state')}, {counted(done['solver_calls'], 'solver call')}"


# after the summary line of a run stopped at its time limit before any search task finished in it
NO_PROGRESS = (
    "  note: no search task finished in this run: a task takes longer than the time limit, so a resume "
    "with the same limit makes no progress either; give a longer --time-limit"
)


def verdict_lines(done: Mapping[str, Any], gpu_name: str, outside: str = OUTSIDE) -> list[str]:
    """The run's final verdict from its `done` event (with the library entry's `report`, `kernels` and
    `expert`): the search's state, per fragment the chosen μGraph or the reference with its estimated
    speedup, the fragments together (`outside`: what no fragment holds, see `together_line`), and
    where the results are."""
    resume = done.get("resume", "run the same command to resume")  # the run says how (a fresh run: without it)
    state = "finished" if done["complete"] else f"stopped at the time limit ({resume})"
    work = (
        f"{counted(done['tasks_run'], 'task')} this run, {_states_and_calls(done)}"
        if done["tasks_run"] or not done["states"]  # a store read back: its states are the whole run's
        else f"nothing searched this time (the store's run: {counted(done['tasks_done'], 'task')}, "
        f"{_states_and_calls(done)})"
    )
    lines = [
        f"{done['program']}: search {state}; {counted(len(done['mugraphs']), 'confirmed μGraph')}, {work}, "
        f"{done['seconds']:.1f} s"
    ]
    if not done["complete"] and not done["tasks_run"] and done.get("tasks_pending"):
        lines.append(NO_PROGRESS)
    for name, ranking in done["ranking"].items():
        best = chosen_row(done, name)
        what = "the reference itself" if best["reference"] else f"μGraph {best['digest'][:16]}"
        if not best["kernels"]:  # its outputs are its inputs: nothing runs, no ratio to give
            lines.append(f"  {name}: best is {what}, no kernel: its outputs are its inputs ({len(ranking):,} ranked)")
            continue
        lines.append(
            f"  {name}: best is {what}, {what_runs(best)}, estimated "
            f"{seconds_text(best['estimated_seconds'])} on {gpu_name}, speedup {speedup_text(best['speedup'])} "
            f"over the reference ({counted(len(ranking), 'μGraph')} ranked)"
        )
        if name in done.get("reranked", {}):
            lines.append(reranked_line(done["reranked"][name], best))
        if name in done.get("not_confident", ()):
            lines.append(not_confident_line(ranking[0]))
        elif best["reference"]:
            lines.append(f"    the reference is kept: {kept_reason(done, name)}")
        if best.get("measured_seconds") is not None:
            speedup = best.get("measured_speedup")
            lines.append(
                f"    measured {seconds_text(best['measured_seconds'])} on {best['measured_device']}"
                + (f", {speedup:.2f}x the reference's measured time" if speedup else "")
                + f" ({done['measured'].get(name, 0)} timed; ranked by measured time)"
            )
    figure = together_line(done, outside)
    if figure is not None:
        lines.append(f"  {figure}")
    if done.get("expert"):
        lines.extend(f"  {line}" for line in str(done["expert"]).splitlines())
    store = shlex.quote(str(done["store"]))  # pasted into a shell as one argument
    lines.append(f"  store: {done['store']}  (mugraph show {store})")
    if done.get("report"):  # none where the store was read back from a read-only place without one
        lines.append(f"  report: {done['report']}")
    if done.get("kernels"):
        check = done.get("kernels_check")
        lines.append(f"  kernels: {done['kernels']}  (Triton" + (f"; {check} runs them)" if check else ")"))
        if done.get("kernels_note"):
            lines.append(f"  note: {done['kernels_note']}")
    return lines
