"""`mugraph search PROGRAM`: the μGraph search alone, serially in one process, with a live line and
what it found said of each expert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from mugraph.arrays.backend import get_array_module
from mugraph.cli.options import backend_option, command_memo, memo_options, space_options
from mugraph.cli.records import ExpertOutcome, SearchSummary, json_line
from mugraph.dashboards.progress_line import ProgressLine
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.graph import KernelGraph
from mugraph.ir.plural import counted
from mugraph.ir.render import render
from mugraph.pipeline.plan import program_config
from mugraph.programs import resolve_program
from mugraph.run.checks import parse_duration
from mugraph.stages.prune.oracle import VERDICT_BYTES
from mugraph.stages.search.config import parse_override
from mugraph.stages.search.explain import explain_expert
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import DEFAULT_BUDGET, SearchReport, run_search
from mugraph.storage.memo.layered import LayeredMemo
from mugraph.storage.memo.url import check_memo_url


def _hit_rate(hits: float, misses: float) -> str:
    return f"{100.0 * hits / (hits + misses):.0f}%" if hits + misses else "n/a"


def _progress_text(r: SearchReport) -> str:
    c = r.counters
    rate = c.nodes / r.seconds if r.seconds > 0 else 0.0
    return (
        f"states {c.nodes:,} ({rate:,.0f}/s) · candidates {c.fingerprints:,} · μGraphs {len(r.found)} · "
        f"memo hits {_hit_rate(c.memo_hits, c.solver_calls)} · solver {c.solver_calls:,} calls "
        f"· {r.seconds:,.0f} s"
    )


@click.command()
@click.argument("program")
@space_options
@click.option(
    "--time-limit",
    default=None,
    metavar="DURATION",
    help="Stop cleanly after this long (90, 15m, 2h); the result says whether the search finished.",
)
@click.option(
    "--budget",
    default=DEFAULT_BUDGET,
    show_default=True,
    type=click.IntRange(min=1),
    help="Nodes per task: the unit of progress updates and of time-limit checks.",
)
@memo_options
@backend_option("Array backend for fingerprints.")
@click.option("--json", "as_json", is_flag=True, help="Last stdout line: one JSON object with the results.")
@click.option("--show", is_flag=True, help="Print every μGraph found.")
def search(
    program: str,
    preset: str | None,
    settings: tuple[str, ...],
    time_limit: str | None,
    budget: int,
    memo_url: str | None,
    memo_dir: Path,
    backend: str,
    as_json: bool,
    show: bool,
) -> None:
    """Search PROGRAM (built-in name, .py or .json file) for equivalent μGraphs, serially in one
    process, with Mirage's search space; report what was found and whether the expert is among them."""
    limit = parse_duration(time_limit) if time_limit is not None else None
    if memo_url is not None:
        check_memo_url(memo_url)
    prog = resolve_program(program)
    config = program_config(prog, preset, dict(parse_override(s) for s in settings or ()))
    fragment = Fragment(prog.reference(), config, prog.name)
    experts = {label: build() for label, build in prog.experts.items()}
    xp = get_array_module(backend)  # the device is checked before the memo directory is made
    with command_memo(memo_url, memo_dir, VERDICT_BYTES) as memo:
        report, per_expert, said = _searched(fragment, experts, memo, xp, budget, limit)
        memo_counts = memo.counters.as_dict()
    summary = _search_summary(prog.name, config.preset, config.digest, report, per_expert, memo.name, memo_counts)
    if show:
        for d in summary["digests"]:
            click.echo(render(report.found[d].kernel_graph(), f"μGraph {d[:16]}  path {list(report.found[d].path)}"))
    if as_json:
        click.echo(json_line(summary))
    else:
        for line in _search_lines(summary, report, said):
            click.echo(line)


def _searched(
    fragment: Fragment,
    experts: dict[str, KernelGraph],
    memo: LayeredMemo,
    xp: Any,
    budget: int,
    limit: float | None,
) -> tuple[SearchReport, dict[str, ExpertOutcome], dict[str, str]]:
    """The serial search, with a progress line, and every expert: found, or the reason the search
    misses it; and what the text says of each ("found", "NOT found: ...", or "not found yet: ..." for
    one inside the space of a search stopped at its time limit, as `optimize` says it)."""
    searcher = Searcher(fragment, memo, xp=xp)
    progress = ProgressLine()
    try:
        report = run_search(searcher, budget, limit, lambda r: progress.update(_progress_text(r)))
    finally:
        progress.close()
    per_expert: dict[str, ExpertOutcome] = {
        label: {"found": canonical_digest(g) in report.found, "reason": None} for label, g in experts.items()
    }
    said = dict.fromkeys(per_expert, "found")
    for label, outcome in per_expert.items():
        if not outcome["found"]:
            why = explain_expert(searcher, label, experts[label])
            outcome["reason"], said[label] = why.missed_reason(report.complete), why.missed_line(report.complete)
    return report, per_expert, said


def _search_summary(
    program: str,
    preset: str,
    config_digest: str,
    report: SearchReport,
    per_expert: dict[str, ExpertOutcome],
    memo: str,
    memo_counts: dict[str, int | float],
) -> SearchSummary:
    """`search --json`'s record: the first expert is the one `expert_found` and `expert_reason` speak of."""
    first = per_expert[next(iter(per_expert))] if per_expert else None
    c = report.counters
    digests = sorted(report.found)
    return {
        "program": program,
        "preset": preset,
        "config_digest": config_digest,
        "states": c.nodes,
        "mugraphs": len(digests),
        "digests": digests,
        "expert_found": first["found"] if first is not None else None,
        "expert_reason": first["reason"] if first is not None else None,
        "experts": per_expert,
        "solver_calls": c.solver_calls,
        "seconds": round(report.seconds, 3),
        "complete": report.complete,
        "frontier": len(report.frontier),
        "tasks": report.tasks,
        "memo": memo,
        "counters": c.as_dict(),
        "memo_counters": memo_counts,
        "paths": {d: list(report.found[d].path) for d in digests},
    }


def _search_lines(summary: SearchSummary, report: SearchReport, said: dict[str, str]) -> list[str]:
    """`search`'s text: what was found and what it says of each expert, then what it took."""
    c = report.counters
    left = counted(len(report.frontier), "subtree")
    state = "finished" if report.complete else f"stopped at the time limit, {left} left"
    labels = list(said)
    expert = f", expert {labels[0]!r} {said[labels[0]]}" if labels else ""
    others = [f"{label} {said[label]}" for label in labels[1:]]
    expert += f"; other experts: {'; '.join(others)}" if others else ""
    return [
        f"{summary['program']}: {counted(summary['mugraphs'], 'μGraph')}{expert}; search {state}",
        f"  {_progress_text(report)}",
        f"  oracle: {c.oracle_queries:,} queries, {c.prefiltered:,} answered by finite models, "
        f"{c.memo_hits:,} memo hits, {c.solver_calls:,} solver calls in {c.solver_seconds:.1f} s, "
        f"{c.undecided_kept + c.undecided_pruned:,} undecided; "
        f"fingerprints: {c.fingerprints:,} in {c.fingerprint_seconds:.1f} s",
    ]
