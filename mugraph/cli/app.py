"""The `mugraph` command line. Errors meant for people print one line and exit with status 2."""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import click

from mugraph.arrays.backend import backend_name, get_array_module
from mugraph.cli.options import backend_option, memo_options
from mugraph.cli.pipeline import optimize, report, show, status
from mugraph.cli.records import ExpertCheck, ExpertOutcome, ExpertReach, SearchSummary, json_line
from mugraph.dashboards.progress_line import ProgressLine
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError, warning_line
from mugraph.ir.graph import KernelGraph
from mugraph.ir.plural import counted
from mugraph.ir.render import render
from mugraph.ir.serialize import digest
from mugraph.pipeline.interrupts import (  # noqa: F401  (_interrupted: the handler, for tests)
    EXIT_INTERRUPTED,
    INTERRUPTED,
    INTERRUPTED_FRESH,
    _interrupted,
    install_interrupt_handlers,
    quiet_event_loop_logs,
)
from mugraph.pipeline.plan import program_config
from mugraph.programs import Program, builtin_programs, resolve_program
from mugraph.run.checks import parse_duration
from mugraph.stages.prune.expr import labelled_exprs, output_exprs
from mugraph.stages.prune.oracle import (
    DEFAULT_RLIMIT,
    ENGINES,
    VERDICT_BYTES,
    Engine,
    OracleConfig,
    OracleCounters,
    SubexprOracle,
)
from mugraph.stages.search.config import PRESETS, parse_override
from mugraph.stages.search.explain import explain_expert
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.search.serial import DEFAULT_BUDGET, SearchReport, run_search
from mugraph.stages.verify.check import DEFAULT_SEEDS, check_equivalence
from mugraph.stages.verify.field import FieldSpec
from mugraph.storage.memo.layered import LayeredMemo
from mugraph.storage.memo.session import verdict_memo
from mugraph.storage.memo.url import check_memo_url

EXIT_USAGE = 2


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers") from None
    if not seeds:
        raise click.BadParameter("at least one seed is needed")
    if any(not 0 <= s < 2**32 for s in seeds):
        raise click.BadParameter(f"{text!r}: seeds are integers from 0 to 2**32-1")
    return seeds


def _program_with_experts(spec: str, purpose: str) -> Program:
    prog = resolve_program(spec)
    if not prog.experts:
        raise MugraphError(f"{spec}: the program has no expert μGraphs to {purpose}")
    return prog


# The commands in the order one uses them, each with a summary that fits `--help`'s column and an
# example shown at the end of its own help. Lower-level tools come last.
COMMAND_HELP: dict[str, tuple[str, tuple[str, ...]]] = {
    "list": ("The built-in programs, their presets and descriptions.", ("mugraph list",)),
    "check": (
        "Check a program's experts against its reference.",
        ("mugraph check lora", "mugraph check my_program.py --show"),
    ),
    "explain": (
        "Say whether the search can find each expert, and why not.",
        ("mugraph explain rms_norm", "mugraph explain rms_norm --set 'franges=[16]'"),
    ),
    "optimize": (
        "Search, confirm, rank and stitch: the whole pipeline.",
        (
            "mugraph optimize rms_norm",
            "mugraph optimize gqa --time-limit 15m   # the same command resumes",
            "mugraph optimize my_program.py --workers 4 --emit",
        ),
    ),
    "status": ("Tasks done and pending in a run store; size and ETA.", ("mugraph status runs/rms_norm-*.zarr",)),
    "show": ("A run store's ranking, headline and chosen μGraph.", ("mugraph show runs/rms_norm-*.zarr --all",)),
    "report": (
        "Write a run store's HTML report (one offline file).",
        ("mugraph report runs/rms_norm-*.zarr --out rms_norm.html",),
    ),
    "emit": (
        "Write the chosen μGraph as Triton kernels ([kernels]).",
        ("mugraph emit runs/lora-*.zarr --check", "mugraph emit lora --expert concat --out lora_kernels.py"),
    ),
    "repair": (
        "Mend a damaged run store, keeping every intact record.",
        ("mugraph repair runs/rms_norm-*.zarr --dry-run", "mugraph repair runs/rms_norm-*.zarr"),
    ),
    "search": (
        "Lower level: the μGraph search alone, in one process.",
        ("mugraph search lora --set 'grids=[[64,1,1]]' --set 'fmaps=[-1]' --set 'kernel_ops=[]'",),
    ),
    "prune": ("Lower level: ask the subexpression oracle about an expert's tensors.", ("mugraph prune lora",)),
}


class WorkflowGroup(click.Group):
    """Lists commands in COMMAND_HELP's order (then any others), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        order = {name: i for i, name in enumerate(COMMAND_HELP)}
        return sorted(self.commands, key=lambda name: (order.get(name, len(order)), name))

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        key = name or cmd.name
        if key in COMMAND_HELP:
            summary, examples = COMMAND_HELP[key]
            cmd.short_help = summary
            cmd.epilog = (
                "\b\nExample" + ("s" if len(examples) > 1 else "") + ":\n" + "\n".join(f"  {e}" for e in examples)
            )
        super().add_command(cmd, name)


@click.group(
    cls=WorkflowGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="\b\nFirst run (under a minute on 2 cores):\n"
    "  mugraph optimize rms_norm          # search, confirm, rank; prints the best μGraph\n"
    "  mugraph show runs/rms_norm-*.zarr  # the ranking and the chosen μGraph\n"
    "`mugraph COMMAND --help` gives each command's options and examples.",
)
@click.version_option(package_name="mugraph")
def cli() -> None:
    """mugraph: finds faster equivalent versions (μGraphs: fused multi-level kernels) of a tensor program,
    checks them, ranks them on a GPU model and writes the best as Triton kernels."""


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per program on stdout.")
def list_cmd(as_json: bool) -> None:
    """Name the built-in programs: name, search preset, experts, what it computes."""
    programs = builtin_programs()
    if as_json:
        for name, prog in programs.items():
            click.echo(
                json.dumps(
                    {
                        "program": name,
                        "preset": prog.preset,
                        "description": prog.description,
                        "experts": list(prog.experts),
                    }
                )
            )
        return
    rows = [("program", "preset", "experts", "description")]
    rows += [(name, prog.preset, str(len(prog.experts)), prog.description) for name, prog in programs.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3])


def _check_reference_only(
    name: str, reference: KernelGraph, seeds: tuple[int, ...], spec: FieldSpec, xp: Any, as_json: bool, t0: float
) -> None:
    """A program with no experts is valid once its reference loads and evaluates: experts are
    optional (the search finds the μGraphs). The reference is run through both interpreters."""
    r = check_equivalence(reference, reference, seeds, spec, xp)
    if not r.equivalent:  # the reference disagrees with itself: an interpreter fault, not the user's
        raise MugraphError(f"{name}: the reference does not evaluate consistently ({r.reason})")
    seconds = time.perf_counter() - t0
    if as_json:
        click.echo(
            json.dumps(
                {
                    "program": name,
                    "equivalent": True,
                    "float_max_rel_err": None,
                    "seconds": round(seconds, 4),
                    "backend": backend_name(xp),
                    "p": spec.p,
                    "q": spec.q,
                    "seeds": list(seeds),
                    "reference_digest": digest(reference),
                    "experts": [],
                    "reference_only": True,
                }
            )
        )
        return
    ins = ", ".join(f"{n} {list(shape)}" for n, shape, _ in reference.input_signature())
    click.echo(
        f"{name}: reference valid (inputs {ins}; evaluated in Z_pq and float64 in {seconds:.2f} s "
        f"on {backend_name(xp)}); no experts to check, `mugraph optimize` searches for μGraphs"
    )


def _digests(graph: KernelGraph, *, program: bool = False) -> str:
    """A shown graph's digests, each named: the μGraph digest (canonical: what `emit --digest`, `show` and
    the search name it by) and, for the reference, the program digest (what a default store's name holds)."""
    said = f"μGraph digest {canonical_digest(graph)[:16]}"
    return said + (f", program digest {digest(graph)[:16]} (default store names hold it)" if program else "")


@cli.command()
@click.argument("program")
@click.option("--json", "as_json", is_flag=True, help="Last stdout line: one JSON object with the verdict.")
@click.option(
    "--seeds",
    default=",".join(map(str, DEFAULT_SEEDS)),
    show_default=True,
    help="Fingerprint seeds (random inputs and ω per seed).",
)
@backend_option("Array backend for fingerprints.")
@click.option("--p", "p", default=227, show_default=True, help="Fingerprint prime p.")
@click.option("--q", "q", default=113, show_default=True, help="Fingerprint prime q (q must divide p-1).")
@click.option("--show", is_flag=True, help="Print the reference and expert graphs.")
def check(program: str, as_json: bool, seeds: str, backend: str, p: int, q: int, show: bool) -> None:
    """Fingerprint every expert μGraph of PROGRAM (built-in name, .py or .json file) against its
    reference, then compare in float64."""
    seed_list = _seeds(seeds)
    prog = resolve_program(program)
    spec = FieldSpec(p, q)
    xp = get_array_module(backend)
    t0 = time.perf_counter()
    reference = prog.reference()
    if show:
        click.echo(render(reference, f"reference {prog.name}  {_digests(reference, program=True)}"))
    if not prog.experts:
        _check_reference_only(prog.name, reference, seed_list, spec, xp, as_json, t0)
        return
    rows: list[ExpertCheck] = []
    for label, build in prog.experts.items():
        expert = build()
        if show:
            click.echo(render(expert, f"expert {label}  {_digests(expert)}"))
        r = check_equivalence(reference, expert, seed_list, spec, xp)
        rows.append(
            {
                "expert": label,
                "digest": canonical_digest(expert),
                "equivalent": r.equivalent,
                "undecided": r.undecided,
                "float_max_rel_err": r.float_max_rel_err,
                "fingerprint_seconds": round(r.fingerprint_seconds, 4),
                "float_seconds": round(r.float_seconds, 4),
                "reason": r.reason,
            }
        )
        if not as_json:
            said = "UNDECIDED" if r.undecided else "NOT equivalent"
            verdict = "EQUIVALENT" if r.equivalent else f"{said} ({r.reason})"
            err = "n/a" if r.float_max_rel_err is None else f"{r.float_max_rel_err:.2e}"
            click.echo(
                f"{prog.name} [{label}]: {verdict}; fingerprints on seeds "
                f"{','.join(map(str, seed_list))} in {r.fingerprint_seconds:.2f} s, "
                f"float64 max rel err {err}"
            )
    seconds = time.perf_counter() - t0
    equivalent = all(row["equivalent"] for row in rows)
    errs = [row["float_max_rel_err"] for row in rows if row["float_max_rel_err"] is not None]
    summary = {
        "program": prog.name,
        "equivalent": equivalent,
        "float_max_rel_err": max(errs) if len(errs) == len(rows) else None,
        "seconds": round(seconds, 4),
        "backend": backend_name(xp),
        "p": p,
        "q": q,
        "seeds": list(seed_list),
        "reference_digest": digest(reference),
        "experts": rows,
    }
    if as_json:
        click.echo(json_line(summary))
    else:
        undecided = not equivalent and all(row["equivalent"] or row["undecided"] for row in rows)
        outcome = "all experts equivalent" if equivalent else "UNDECIDED (not accepted)" if undecided else "MISMATCH"
        click.echo(f"{prog.name}: {outcome} ({seconds:.2f} s on {backend_name(xp)})")
    if not equivalent:
        sys.exit(1)


@cli.command()
@click.argument("program")
@click.option("--json", "as_json", is_flag=True, help="Last stdout line: one JSON object with the verdicts.")
@memo_options
@click.option(
    "--oracle",
    "engine",
    type=click.Choice(ENGINES),
    default="normal_form",
    show_default=True,
    help="Who answers: normal forms (exact, the search's default), Z3 under Mirage's axioms (Mirage's "
    "route, `unknown` at its rlimit), or both (Z3's verdicts checked against the normal forms').",
)
@click.option(
    "--rlimit",
    default=None,
    type=click.IntRange(min=1),
    help=f"With --oracle z3 or both: Z3's resource limit per query (deterministic, part of every memo key; "
    f"default {DEFAULT_RLIMIT}).",
)
@click.option(
    "--unknown-keeps",
    is_flag=True,
    help="With --oracle z3: keep candidates whose query hits the rlimit (default: prune them, as Mirage does).",
)
def prune(
    program: str,
    as_json: bool,
    memo_url: str | None,
    memo_dir: Path,
    engine: Engine,
    rlimit: int | None,
    unknown_keeps: bool,
) -> None:
    """Ask the abstract-expression oracle about every intermediate tensor of PROGRAM's experts.

    An expert the search can reach has every intermediate kept (its abstract expression is a
    subexpression of the reference's output under Mirage's axioms), except a concat read by a matmul,
    which the search makes and judges with the matmul as one step (concat_matmul). Every intermediate
    kept is necessary, not sufficient: `explain` says whether the search reaches the expert."""
    if engine == "normal_form" and (rlimit is not None or unknown_keeps):
        flag = "--rlimit" if rlimit is not None else "--unknown-keeps"
        raise click.UsageError(f"{flag} is Z3's; the normal forms decide without it: give --oracle z3 (or both)")
    if memo_url is not None:
        check_memo_url(memo_url)
    prog = _program_with_experts(program, "ask about")
    t0 = time.perf_counter()
    reference = prog.reference()
    config = OracleConfig(rlimit=rlimit or DEFAULT_RLIMIT, unknown_keeps=unknown_keeps, engine=engine)
    rows: list[ExpertReach] = []
    with verdict_memo(memo_url, memo_dir, VERDICT_BYTES) as memo:
        oracle = SubexprOracle(output_exprs(reference), len(reference.input_tensors), config, memo)
        for label, build in prog.experts.items():
            exprs = labelled_exprs(build())
            verdicts = oracle.verdicts([e for _, e in exprs])
            pruned = [(name, e, v) for (name, e), v in zip(exprs, verdicts, strict=True) if not oracle.keeps(v)]
            rows.append(
                {"expert": label, "tensors": len(exprs), "pruned": [n for n, _, _ in pruned], "reachable": not pruned}
            )
            if not as_json:
                click.echo(
                    f"{prog.name} [{label}]: {len(exprs) - len(pruned)} of {len(exprs)} intermediates "
                    f"kept{'' if pruned else ' (none pruned; `mugraph explain` says whether the search reaches it)'}"
                )
                for name, e, v in pruned:
                    click.echo(f"  pruned {name}: {v.name.lower()}  {e.sexpr}")
        memo_counts = memo.counters.as_dict()
    summary = {
        "program": prog.name,
        "experts": rows,
        "seconds": round(time.perf_counter() - t0, 4),
        "memo": memo.name,
        "oracle": engine,
        **oracle.counters.as_dict(),
        "memo_counters": memo_counts,
    }
    if as_json:
        click.echo(json_line(summary))
    else:
        click.echo(_answers_line(oracle.counters, memo_counts, memo.backend.name if memo.backend else "shared", engine))


def _answers_line(
    c: OracleCounters, memo_counts: dict[str, int | float], shared: str, engine: Engine = "normal_form"
) -> str:
    """Where `prune`'s queries got their answers, in parts that add up to the queries (the solver's
    always said, the others where not zero): the oracle's memo hits also count terms it settled for an
    earlier expert (an intermediate two experts hold), and a term one expert holds twice is asked once."""
    local, remote, waits = int(memo_counts["local_hits"]), int(memo_counts["remote_hits"]), c.claim_waits
    repeats = c.queries - c.memo_hits - c.prefiltered - c.solver_calls - waits
    parts = [
        (c.prefiltered, "refuted by finite models", "refuted by finite models"),
        (c.memo_hits - local - (remote - waits), "answered for an earlier expert", "answered for an earlier expert"),
        (local, "local memo hit", "local memo hits"),
        (remote - waits, f"{shared} memo hit", f"{shared} memo hits"),
        (waits, "solved meanwhile by another process", "solved meanwhile by another process"),
        (repeats, "term repeated within one expert", "terms repeated within one expert"),
    ]
    said = [_engine_part(c, engine)]
    said += [counted(n, one, many) for n, one, many in parts if n]
    return f"{counted(c.queries, 'query', 'queries')}: {', '.join(said)}"


def _engine_part(c: OracleCounters, engine: Engine) -> str:
    """What the engine answered itself: decisions from normal forms, or Z3's calls and unknowns."""
    if engine == "normal_form":
        decided = f"{c.solver_calls:,} decided from normal forms"
        return f"{decided} in {c.solver_seconds:.2f} s ({c.unknowns:,} undecided)"
    said = f"{counted(c.solver_calls, 'Z3 call')} in {c.solver_seconds:.2f} s ({c.unknowns:,} unknown"
    return said + (f", {counted(c.disagreements, 'disagreement')} with the normal forms)" if engine == "both" else ")")


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


@cli.command()
@click.argument("program")
@click.option(
    "--preset", type=click.Choice(PRESETS), default=None, help="Search space preset (default: the program's own)."
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one search limit, VALUE in JSON, e.g. --set 'grids=[[64,1,1]]' --set franges=[64]. Repeatable.",
)
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
    with verdict_memo(memo_url, memo_dir, VERDICT_BYTES) as memo:
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
    expert = f", expert {said[labels[0]]}" if labels else ""
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


cli.add_command(optimize)
cli.add_command(status)
cli.add_command(show)
cli.add_command(report)

from mugraph.cli.emit import emit  # noqa: E402
from mugraph.cli.explain import explain  # noqa: E402
from mugraph.cli.repair import repair  # noqa: E402

cli.add_command(emit)
cli.add_command(explain)
cli.add_command(repair)


RESUMABLE = ("optimize", "search", "prune")


def _interrupted_line(args: list[str]) -> str:
    """Only a search has work to continue (its store, or its memo's verdicts); other commands simply
    stopped. A `--fresh` run goes on without the flag, which would delete its store again."""
    if not args or args[0] not in RESUMABLE:
        return "interrupted"
    flags = args[: args.index("--")] if "--" in args else args
    return INTERRUPTED_FRESH if "--fresh" in flags else INTERRUPTED


def main(argv: list[str] | None = None) -> None:
    """Entry point: MugraphErrors become one line on stderr and exit status 2, never a traceback;
    warnings are one line each."""
    warnings.formatwarning = warning_line
    if threading.current_thread() is threading.main_thread():
        install_interrupt_handlers()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # not click's `main`: on an interrupt it writes an empty line before the command's one line
        with cli.make_context("mugraph", args) as top:
            cli.invoke(top)
    except (KeyboardInterrupt, click.exceptions.Abort):
        # Every `with` block (store, memo server, cluster) has closed on the way here.
        click.echo(f"mugraph: {_interrupted_line(args)}", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if isinstance(e, click.UsageError) and ctx is not None else ""
        click.echo(f"mugraph: error: {e.format_message()}{hint}", err=True)
        sys.exit(EXIT_USAGE)
    except MugraphError as e:
        one_line = " | ".join(part.strip() for part in str(e).splitlines() if part.strip())
        click.echo(f"mugraph: error: {one_line}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        if e.errno == errno.EPIPE:  # the reader went away (`mugraph list | head -1`), as click's main does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        if e.errno == errno.ENOSPC:
            click.echo(
                f"mugraph: error: no space left on device{where}; free some space and run the same "
                "command again (a run store stays resumable)",
                err=True,
            )
        else:
            click.echo(f"mugraph: error: {e.strerror or e}{where}", err=True)
        sys.exit(EXIT_USAGE)
