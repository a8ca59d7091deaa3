"""`mugraph prune PROGRAM`: the subexpression oracle asked about every intermediate tensor of a
program's experts, by the engine chosen (normal forms, Z3, or both side by side)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from mugraph.cli.options import command_memo, memo_options, program_with_experts
from mugraph.cli.records import ExpertReach, json_line
from mugraph.ir.plural import counted
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
from mugraph.storage.memo.url import check_memo_url

# lora's `concat` expert: two concats pruned, and the expert found (the search builds a concat with the
# matmul that reads it, `concat_matmul`, and judges the two as one step)
CONCAT_NOTE = (
    "a pruned concat bars nothing where a matmul reads it: the search makes the two in one step and asks "
    "the oracle of the product (`mugraph explain` says whether it reaches the expert)"
)


@click.command()
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
    prog = program_with_experts(program, "ask about")
    t0 = time.perf_counter()
    reference = prog.reference()
    config = OracleConfig(rlimit=rlimit or DEFAULT_RLIMIT, unknown_keeps=unknown_keeps, engine=engine)
    rows: list[ExpertReach] = []
    with command_memo(memo_url, memo_dir, VERDICT_BYTES) as memo:
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
                if any(e.sexpr.startswith("(concat ") for _, e, _ in pruned):
                    click.echo(f"  {CONCAT_NOTE}")
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
