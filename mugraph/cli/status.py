"""`mugraph status` and `report`: a run store summed up (beside a running search too), in a few lines
(what is done and pending, how big the space is, each fragment's best so far, how to go on with a
stopped run) or as one HTML page."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import click

from mugraph.cli.options import store_argument
from mugraph.cli.records import json_line
from mugraph.dashboards.find_times import find_line, run_seconds
from mugraph.dashboards.provisional import stored_or_provisional
from mugraph.dashboards.report import REPORT_MARK, write_report
from mugraph.dashboards.summary import eta_rate, eta_text, run_rate, states_so_far
from mugraph.ir.names import printable
from mugraph.run.checks import check_output_file, check_store_name
from mugraph.run.resume import how_to_resume
from mugraph.stages.layout.profiles import DEFAULT_PROFILE, get_profile
from mugraph.storage.run.backends import open_existing
from mugraph.storage.run.paths import RunPaths
from mugraph.storage.run.run_records import ProgressSample


class FragmentStatus(TypedDict):
    """One fragment as `status --json` prints it."""

    name: str
    preset: str | None
    found: int
    confirmed: int
    best: str | None  # the best row's digest so far (the reference's where it ranks first)
    best_is_reference: bool
    best_found: str | None  # when the fastest ranked μGraph was found (stores that keep find times)
    provisional: bool  # ranked from the store's confirmed μGraphs: the run stopped before ranking them


SIZE_KEYS = (
    "estimated_states",
    "estimated_fraction",
    "eta_seconds",
    "states",
    "states_per_s",
    "states_per_s_searching",
)


def _size(
    timeline: Sequence[Sequence[ProgressSample]], done_states: int
) -> tuple[ProgressSample | None, dict[str, Any] | None]:
    """The last progress sample with a size estimate (an invocation that ran no task, a finished run
    resumed or one stopped at once, samples none, and the earlier one still holds), and the size
    `status` reports from it: the done tasks' states, beside a run ahead of the sample."""
    samples = [s for inv in timeline for s in inv]
    last = next((s for s in reversed(samples) if s.get("estimated_states") is not None), None)
    last = last or (samples[-1] if samples else None)
    if last is None:
        return None, None
    size = {k: last.get(k) for k in SIZE_KEYS}
    estimated = last.get("estimated_states")
    size["states"], ahead = states_so_far(int(last["states"]), estimated or 0, done_states)
    if estimated is not None:
        size["estimated_states"] = ahead
    return last, size


@click.command()
@store_argument
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def status(store: Path, as_json: bool) -> None:
    """What is done and pending in a run STORE, and the best μGraphs so far."""
    with open_existing(store, readonly=True) as st:
        summary = st.task_summary()
        frags = st.fragments()
        final = st.final()
        writer = st.writer()
        per: list[FragmentStatus] = []
        timeline = st.timeline()
        total = run_seconds(timeline)
        for i, f in enumerate(frags):
            conf = st.confirmations(i)
            ranking, so_far = stored_or_provisional(st, i, get_profile(DEFAULT_PROFILE), writer is not None)
            per.append(
                {
                    "name": f["name"],
                    "preset": f.get("preset"),
                    "found": len(st.found(i)),
                    "confirmed": sum(1 for r in conf.values() if r["equivalent"]),
                    "best": ranking[0]["digest"] if ranking else None,
                    "best_is_reference": bool(ranking and ranking[0].get("reference")),
                    "best_found": find_line(st.found(i), ranking or [], total),
                    "provisional": so_far,
                }
            )
        last, size = _size(timeline, int(summary.get("counters", {}).get("nodes", 0)))
        resume = how_to_resume(store, st.meta)
        out = {
            "store": str(store),
            "identity": st.identity,
            "tasks": summary,
            "fragments": per,
            "complete": bool(final and final.get("complete")),
            "running": writer,
            "best": final.get("best") if final else None,
            # the run's best is the reference program: every fragment's best is its reference
            "best_is_reference": bool(final and per and all(p["best_is_reference"] for p in per)),
            "size": size,
        }
    if as_json:
        click.echo(json_line(out))
        return
    ident = st.identity
    click.echo(
        f"{printable(str(store))}: program {printable(str(ident.get('program')))}, "
        f"budget {printable(str(ident.get('budget')))}, "
        + (
            "complete"
            if out["complete"]
            else f"running (pid {writer})"
            if writer is not None
            else f"not complete ({resume})"
        )
    )
    click.echo(f"  tasks: {summary.get('done', 0):,} done, {summary.get('pending', 0):,} pending")
    states = int(summary.get("counters", {}).get("nodes", 0))
    if not summary.get("done", 0) and not summary.get("pending", 0):
        why = "the run has recorded none so far" if writer is not None else resume
        click.echo(f"  size: not started (no task recorded yet: {why})")
    elif out["complete"] or not summary.get("pending", 0):
        click.echo(f"  size: {states:,} states, the whole space")
    elif last is not None and last.get("estimated_states") is not None:
        pending, runs = int(summary.get("pending", 0)), [inv for inv in timeline if inv]
        if writer is not None or len(runs) < 2:
            click.echo(
                f"  size: {eta_text(states, last['estimated_states'], pending, eta_rate(last))} (at this run's rate)"
            )
        else:
            eta = eta_text(states, last["estimated_states"], pending, run_rate(runs))
            click.echo(f"  size: {eta} (at the rate of its {len(runs)} invocations together)")
    for p in per:
        best = "the reference program" if p["best_is_reference"] else (p["best"] or "-")[:16]
        name, preset = printable(str(p["name"])), printable(str(p["preset"]))
        when = f"; {p['best_found']}" if p["best_found"] else ""
        going = "the run is still going" if writer is not None else "the run stopped before its end"
        when += f" (ranked now from what the store holds: {going})" if p["provisional"] else ""
        click.echo(f"  {name} ({preset}): {p['found']} found, {p['confirmed']} confirmed, best {best}{when}")


@click.command()
@store_argument
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write the HTML (default: beside the store, NAME.report.html).",
)
def report(store: Path, out: Path | None) -> None:
    """Write the HTML report of a run STORE: configuration, fragments, timeline of states/s and memo hit
    rates, per-worker busy time, rankings, the chosen μGraphs drawn, counters. One self-contained file
    (no network needed); `optimize` writes it at the end of every run. Works beside a running search."""
    path = check_store_name(str(store), "STORE")
    target = check_output_file(
        out if out is not None else RunPaths(path).report, "--out" if out is not None else "report", REPORT_MARK
    )
    click.echo(str(write_report(path, target)))
