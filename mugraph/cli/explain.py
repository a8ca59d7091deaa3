"""`mugraph explain`: whether each expert μGraph of a program is inside the configured search space,
and if not, the first choice that excludes it and the setting that would admit it."""

from __future__ import annotations

from pathlib import Path

import click

from mugraph.cli.options import command_memo, memo_options, space_options
from mugraph.cli.records import json_line
from mugraph.ir.errors import MugraphError
from mugraph.ir.graph import BlockGraph, KernelGraph
from mugraph.pipeline.plan import program_config
from mugraph.programs import resolve_program
from mugraph.programs.program import suggest_preset
from mugraph.run.expert import as_found, not_equivalent, split_note
from mugraph.stages.fragments import split_program
from mugraph.stages.prune.oracle import VERDICT_BYTES
from mugraph.stages.search.config import parse_override
from mugraph.stages.search.explain import explain_expert
from mugraph.stages.search.explore import Fragment, Searcher
from mugraph.stages.verify.check import ReferenceCheck
from mugraph.storage.memo.url import check_memo_url


@click.command()
@click.argument("program")
@click.option("--expert", "only", default=None, metavar="NAME", help="Explain this expert only (default: every one).")
@space_options
@memo_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per expert on stdout.")
def explain(
    program: str,
    only: str | None,
    preset: str | None,
    settings: tuple[str, ...],
    memo_url: str | None,
    memo_dir: Path,
    as_json: bool,
) -> None:
    """Say whether the search of PROGRAM (built-in name, .py or .json file) can find each of its experts:
    if not, the first choice that excludes it and the setting that would admit it; if so, its path.
    Exit 1 where an expert does not compute the reference (as `check` would say), else 0."""
    if memo_url is not None:
        check_memo_url(memo_url)
    prog = resolve_program(program)
    if not prog.experts:  # nothing to explain is no error (`check` of such a program exits 0 too)
        click.echo(f"mugraph: {prog.name} has no expert μGraphs to explain", err=True)
        return
    if only is not None and only not in prog.experts:
        raise MugraphError(f"{prog.name} has no expert {only!r}; its experts: {', '.join(prog.experts)}")
    config = program_config(prog, preset, dict(parse_override(s) for s in settings or ()))
    labels = [only] if only is not None else list(prog.experts)
    parts = len(split_program(prog.reference()).fragments)
    if parts > 1 and not as_json:  # what follows is of a search `optimize` does not run
        click.echo(f"note: {split_note(parts)}; below, the search of the whole program as one fragment")
    with command_memo(memo_url, memo_dir, VERDICT_BYTES) as memo:
        reference = prog.reference()
        searcher = Searcher(Fragment(reference, config, prog.name), memo)
        mismatched = outside = False
        against = ReferenceCheck(reference, seeds=(0,))  # the reference's side computed once for all
        for label in labels:
            expert = prog.experts[label]()
            wrong = not_equivalent(label, against, expert)
            mismatched |= wrong is not None
            e = wrong or explain_expert(searcher, label, as_found(reference, expert))
            # outside, and on a (batch, y, z) grid: the attention preset's
            outside |= wrong is None and not e.inside and any(g.grid[1:] != (1, 1) for g in _block_graphs(expert))
            if as_json:
                click.echo(json_line({"program": prog.name, "fragments": parts, **e.as_json()}))
                continue
            click.echo(f"{prog.name} [{label}]: {e.line()}")
            if e.labels:
                click.echo(f"  {'path' if e.inside else 'excluded after'}: {' > '.join(e.labels)}")
    if outside and not as_json and config.preset != "attention" and suggest_preset(reference) == "attention":
        click.echo(
            f"note: {prog.name} computes an exp (an attention's softmax) and is searched with the "
            f'{config.preset} preset; --preset attention (or preset = "attention" in its file) searches '
            "attention's grids and maps"
        )
    if mismatched:  # an expert that is not the reference's equal: a mismatch, as `check` exits on one
        raise SystemExit(1)


def _block_graphs(graph: KernelGraph) -> list[BlockGraph]:
    return [op.block for op in graph.ops if op.block is not None]
