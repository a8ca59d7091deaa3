"""`mugraph show`: a run store's rankings read back (beside a running search too), each fragment's
chosen μGraph drawn with its layouts, and, for a run that stopped before its end, what the rankings
are and how to go on with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import click

from mugraph.cli.options import store_argument
from mugraph.cli.records import json_line
from mugraph.dashboards.experts import expert_labels, expert_marks, expert_note
from mugraph.dashboards.provisional import stored_or_provisional
from mugraph.dashboards.summary import headline, held_back_reason, rows_to_show, stored_together
from mugraph.ir.errors import MugraphError
from mugraph.ir.names import printable
from mugraph.ir.plural import counted
from mugraph.ir.render import render
from mugraph.ir.serialize import loads
from mugraph.ir.together import speedup_text
from mugraph.run.kernels import program_outputs
from mugraph.run.resume import how_to_resume
from mugraph.stages.layout.costs import Layouts
from mugraph.stages.layout.describe import describe_layouts, seconds_text, what_runs
from mugraph.stages.layout.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from mugraph.stages.layout.rank import MODEL_ERROR, rerank
from mugraph.stages.layout.rows import RankedRow
from mugraph.storage.run.backends import open_existing

SHOW_ROWS = 10  # ranking rows `show` prints without --all (the reference's row is always added)


class ShownFragment(TypedDict):
    """One fragment as `show --json` prints it: its ranking, the chosen row and that μGraph's graph."""

    name: str
    ranking: list[RankedRow]
    best: RankedRow | None
    graph: str | None  # ir.serialize JSON


STOPPED_EARLY = (
    "the run stopped before its end (interrupted or killed): the rankings below are of the μGraphs confirmed "
    "and laid out so far, not stitched or checked end to end; {resume} (with a time limit of 1 s in place of "
    "any it has, the run only ranks and stitches what the store holds)"
)


def _before_end(writer: int | None, resume: str) -> str:
    """What `show` says above rankings made before the run's end: that it is still going, or stopped
    (and how to go on with it, `resume`)."""
    if writer is None:
        return STOPPED_EARLY.format(resume=resume)
    return (
        f"the run is still going (pid {writer}): the rankings below are of the μGraphs confirmed and laid out "
        "so far, not stitched or checked end to end"
    )


def _tie_values(term: str, values: Any) -> str:
    """The two values of the term that separates a near tie, in its unit (times in μs, counts as counts;
    times apart by less than a tenth of a μs with more digits)."""
    if not isinstance(values, list | tuple):
        return str(values)

    def one(v: Any, digits: int = 0) -> str:
        if v is None:
            return "-"
        if term.endswith("_seconds") and isinstance(v, int | float):
            return f"{float(v) * 1e6:.{digits}g} μs" if digits else seconds_text(float(v))
        if term == "digest" and isinstance(v, str):
            return v[:16]
        return f"{v:,}" if isinstance(v, int) else (f"{v:,.3g}" if isinstance(v, float) else str(v))

    texts = [one(v) for v in values]
    if len(set(texts)) == 1 and len(set(values)) > 1:
        texts = [one(v, 6) for v in values]
    return " against ".join(texts)


def _held_back(e: RankedRow) -> str | None:
    """Why a candidate estimated faster than the reference is not chosen (None where it is, or is slower)."""
    if e.get("reference") or e.get("confident", True) or e.get("speedup", 0.0) <= 1.0:
        return None
    return held_back_reason(e)


def _ranking_lines(ranking: list[RankedRow], limit: int | None, experts: dict[str, str]) -> list[str]:
    """The ranking table; past `limit` rows, the reference's row is still shown (speedups are over it)."""
    timed = any("measured_seconds" in e for e in ranking)
    head = (
        f"   {'#':>3}  {'μGraph':<16}  {'kernels':>7}  {'DRAM bytes':>13}  {'FLOPs':>15}  {'est. time':>11}  "
        f"{'speedup':>7}  bound    fits" + (f"  {'measured':>11}" if timed else "")
    )
    lines = [head]
    shown = rows_to_show(ranking, limit)
    own = {e["digest"] for e in ranking if e.get("reference")}  # the reference's graph, also found as a μGraph
    for n, e in shown:
        if limit and n > limit:
            lines.append("   ...")
        tag = "reference" if e.get("reference") else e["digest"][:16]
        expert = f"  (expert {experts[e['digest']]})" if e["digest"] in experts else ""
        if not e.get("reference") and e["digest"] in own:
            expert += "  (the reference's own graph, as the search found it)"
        runs = what_runs(e)
        if runs != counted(e["kernels"], "kernel"):  # a PyTorch reference, priced as the calls it runs
            expert += f"  (priced as {runs})"
        measured = seconds_text(e["measured_seconds"]) if "measured_seconds" in e else "-"
        lines.append(
            f"   {n:>3}  {tag:<16}  {e['kernels']:>7}  {e['dram_bytes']:>13,}  {e['flops']:>15,}  "
            f"{seconds_text(e['estimated_seconds']):>11}  {speedup_text(e['speedup']):>7}  {e['bound']:<7}  "
            f"{'yes' if e['fits'] else 'NO '}" + (f"  {measured:>11}" if timed else "") + expert
        )
        if "near_tie" in e:
            lines.append(
                f"          ~ near tie with {e['near_tie'][:16]} (within {MODEL_ERROR:.0%}); "
                f"separated by {e['tie_break']} {_tie_values(e['tie_break'], e.get('tie_values'))}"
            )
        held = _held_back(e)
        if held:
            lines.append(f"          ~ ranked after the reference: {held}")
    if len(ranking) > len(shown):
        lines.append(f"   ... {len(ranking) - len(shown)} more (--all shows every row)")
    return lines


def _print_chosen(shown_frag: ShownFragment, given: dict[str, str]) -> None:
    """The chosen μGraph of a fragment as `show` draws it: layout cost, graph, which program output each
    of its outputs is (where they have names of their own), layouts."""
    best, graph = shown_frag["best"], shown_frag["graph"]
    if best is None or graph is None:
        return
    terms = ", ".join(f"{k} {v:,}" for k, v in best["layout_terms"].items() if v)
    click.echo(f"   layout cost {best['layout_cost']:,} ({terms or 'nothing'})")
    g = loads(graph)
    click.echo(render(g, f"chosen for {printable(shown_frag['name'])}"))
    if any(o != p for o, p in given.items()):  # the fragment's own names, beside the program's
        click.echo("outputs: " + ", ".join(f"{printable(o)} is the program's {printable(p)}" for o, p in given.items()))
    click.echo("layouts (shape:innermost dim~swizzled dim):")
    for line in describe_layouts(g, Layouts.from_json(best["layouts"])):
        click.echo(f"  {line}")


@click.command()
@store_argument
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout (rankings and graphs).")
@click.option(
    "--gpu-profile",
    default=None,
    metavar="NAME",
    help=f"Rank again for this GPU ({', '.join(PROFILES)}) from the stored layouts; default: the "
    "profile the run was ranked for.",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help=f"Every row of each ranking (default: the first {SHOW_ROWS} and the reference's).",
)
@click.option(
    "--program",
    default=None,
    metavar="FILE",
    help="For a STORE made from a program file (.py): that file, run to name the program output each "
    "fragment output is (a program file a store names is never run unless named here).",
)
def show(store: Path, as_json: bool, gpu_profile: str | None, show_all: bool, program: str | None) -> None:
    """The ranking of every fragment of a run STORE (each μGraph's kernels, DRAM bytes, FLOPs and
    estimated time on a GPU profile, best first), then the chosen μGraph with its layouts."""
    gpu = get_profile(gpu_profile) if gpu_profile is not None else None
    provisional = False
    with open_existing(store, readonly=True) as st:
        frags = st.fragments()
        writer = st.writer()
        rows: list[ShownFragment] = []
        for i, f in enumerate(frags):
            ranking, so_far = stored_or_provisional(st, i, gpu or get_profile(DEFAULT_PROFILE), writer is not None)
            provisional |= so_far
            found = st.found(i)
            graphs = {d: rec.graph for d, rec in found.items()}
            for r in ranking:
                if r.get("reference"):
                    graphs[r["digest"]] = f["graph"]
            if gpu is not None and ranking and not so_far:
                ranking = rerank(ranking, {r["digest"]: loads(graphs[r["digest"]]) for r in ranking}, gpu)
            best = ranking[0] if ranking else None
            rows.append(
                {
                    "name": f["name"],
                    "ranking": ranking,
                    "best": best,
                    "graph": graphs[best["digest"]] if best is not None else None,
                }
            )
        final = st.final()
        experts = expert_labels(st.identity, frags, st.experts())
        names = program_outputs(st, program)
        resume = how_to_resume(store, st.meta)
        from_torch = "model_digest" in st.identity  # a PyTorch model's: its glue is run by PyTorch
    unranked = final is None and not any(r["ranking"] for r in rows)  # nothing confirmed yet
    if unranked and writer is None:
        raise MugraphError(f"{store}: no result yet: its run stopped before it confirmed a μGraph; {resume}")
    if as_json:  # a run going on with nothing confirmed yet: empty rankings, `running` its pid
        shown = {"store": str(store), "fragments": rows, "final": final, "provisional": provisional, "running": writer}
        click.echo(json_line(shown))
        return
    if unranked:  # the run is going
        click.echo(f"the run is still going (pid {writer}) and has confirmed no μGraph yet; show it again later")
        return
    if final is None:
        click.echo(_before_end(writer, resume))
    for shown_frag in rows:
        ranking = shown_frag["ranking"]
        profile = ranking[0]["profile"] if ranking else "-"
        devices = sorted({str(e["measured_device"]) for e in ranking if e.get("measured_device")})
        ranked = counted(sum(not r.get("reference") for r in ranking), "μGraph")
        click.echo(
            f"== {printable(shown_frag['name'])}: {ranked} and the "
            f"reference ranked on {printable(str(profile))} "
            f"({ranking[0]['model'] if ranking else '-'}"
            f"; speedup over the reference program)"
            + (f"; timed rows first, by time measured on {', '.join(devices)}" if devices else "")
        )
        head = headline(ranking)
        if head is not None:
            click.echo(f"   {head['line']}")
            if head["why"]:
                click.echo(f"   why: {head['why']}")
            if head["tie_note"]:
                click.echo(f"   ties: {head['tie_note']}")
        note = expert_note(experts, ranking, bool(final and final.get("complete")))
        if note:
            click.echo(f"   {note}")
        for line in _ranking_lines(ranking, None if show_all else SHOW_ROWS, expert_marks(experts)):
            click.echo(line)
        _print_chosen(shown_frag, names.get(shown_frag["name"], {}))
    if final is None:
        click.echo(_before_end(writer, resume))
        return
    if len(rows) > 1:  # the glue between fragments (ops no fragment holds) shows only here
        click.echo(
            render(loads(final["program_graph"]), "the whole program: the chosen μGraphs and the glue between them")
        )
    figure = stored_together(final, {r["name"]: r["ranking"] for r in rows}, from_torch)
    if figure is not None:  # what the fragments' speedups come to (one fragment's is its own)
        click.echo(figure)
    going = f"a run is going on with it now, pid {writer}" if writer is not None else resume  # not told to resume
    state = "complete" if final["complete"] else f"NOT complete (best so far; {going})"
    err = final["end_to_end_max_rel_err"]
    click.echo(f"run {state}; the run checked the stitched program in float64: max rel err {err:.2e}")
