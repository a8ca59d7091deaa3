"""The `mugraph` command line. Errors meant for people print one line and exit with status 2."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import threading
import time
import warnings
from typing import Any, NoReturn

import click

from mugraph.arrays.backend import backend_name, get_array_module
from mugraph.cli import json_stream
from mugraph.cli.hangup import take_hangup_as_term
from mugraph.cli.options import backend_option
from mugraph.cli.pipeline import optimize
from mugraph.cli.records import ExpertCheck, json_line
from mugraph.cli.show import show
from mugraph.cli.status import report, status
from mugraph.ir.canonical import canonical_digest
from mugraph.ir.errors import MugraphError, warning_line
from mugraph.ir.graph import KernelGraph
from mugraph.ir.render import render
from mugraph.ir.serialize import digest
from mugraph.pipeline.events import ErrorKind
from mugraph.pipeline.interrupts import (  # noqa: F401  (_interrupted: the handler, for tests)
    EXIT_INTERRUPTED,
    EXIT_STDOUT_CLOSED,
    StdoutClosed,
    _interrupted,
    install_interrupt_handlers,
    output_complete,
    quiet_event_loop_logs,
)
from mugraph.programs import builtin_programs, resolve_program
from mugraph.run.prepare import nothing_to_search, unread_parts
from mugraph.run.resume import how_to_resume
from mugraph.stages.fragments import split_program
from mugraph.stages.verify.check import DEFAULT_SEEDS, ReferenceCheck, check_equivalence
from mugraph.stages.verify.field import FieldSpec
from mugraph.storage.run.errors import command_line_text

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
    "prune": ("Lower level: ask the oracle about an expert's tensors.", ("mugraph prune lora",)),
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
    why = nothing_to_search(split_program(reference))  # what `optimize` would refuse it with
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
                    "nothing_to_search": why,
                }
            )
        )
        return
    ins = ", ".join(f"{n} {list(shape)}" for n, shape, _ in reference.input_signature())
    then = "`mugraph optimize` searches for μGraphs" if why is None else f"but nothing for optimize to search: {why}"
    click.echo(
        f"{name}: reference valid (inputs {ins}; evaluated in Z_pq and float64 in {seconds:.2f} s "
        f"on {backend_name(xp)}); no experts to check, {then}"
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
    unread = unread_parts(reference)
    if unread is not None:
        click.echo(f"mugraph: warning: {prog.name}: {unread}", err=True)
    if show:
        click.echo(render(reference, f"reference {prog.name}  {_digests(reference, program=True)}"))
    if not prog.experts:
        _check_reference_only(prog.name, reference, seed_list, spec, xp, as_json, t0)
        return
    rows: list[ExpertCheck] = []
    against = ReferenceCheck(reference, seed_list, spec, xp)  # the reference's side computed once
    for label, build in prog.experts.items():
        expert = build()
        if show:
            click.echo(render(expert, f"expert {label}  {_digests(expert)}"))
        r = against.check(expert)
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


cli.add_command(optimize)
cli.add_command(status)
cli.add_command(show)
cli.add_command(report)

from mugraph.cli.emit import emit  # noqa: E402
from mugraph.cli.explain import explain  # noqa: E402
from mugraph.cli.prune import prune  # noqa: E402
from mugraph.cli.repair import repair  # noqa: E402
from mugraph.cli.search import search  # noqa: E402

cli.add_command(emit)
cli.add_command(explain)
cli.add_command(repair)
cli.add_command(search)
cli.add_command(prune)


RESUMABLE = ("optimize", "search", "prune")


def _fresh(args: list[str]) -> bool:
    """Whether the command started over (`--fresh`): it goes on without the flag, which would delete
    its store again."""
    return "--fresh" in (args[: args.index("--")] if "--" in args else args)


def _interrupted_line(args: list[str]) -> str:
    """Only a search has work to continue (its store, or its memo's verdicts); other commands simply
    stopped."""
    if not args or args[0] not in RESUMABLE:
        return "interrupted"
    return f"interrupted; {how_to_resume(fresh=_fresh(args))}"


def _stdout_closed() -> NoReturn:
    """Exit as a process SIGPIPE killed (a shell's 141), stdout pointed at /dev/null so that the
    interpreter's last flush has nowhere to fail."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_STDOUT_CLOSED)


def _fail(message: str, status: int, kind: ErrorKind, args: list[str]) -> NoReturn:
    """One line on stderr, the `error` event that closes an open `--json` stream, and the exit status."""
    with contextlib.suppress(OSError):  # a terminal that hung up takes no line
        click.echo(f"mugraph: {'' if kind == 'interrupted' else 'error: '}{message}", err=True)
    json_stream.close_with_error(message, status, kind, args)
    sys.exit(status)


def _os_error(e: OSError, args: list[str]) -> NoReturn:
    where = f" ({e.filename})" if e.filename else ""
    if e.errno == errno.EPIPE:  # the reader went away (`mugraph list | head -1`)
        _stdout_closed()
    if e.errno == errno.ENOSPC:
        _fail(
            f"no space left on device{where}; free some space and run the same command again (a run store "
            "stays resumable)",
            EXIT_USAGE,
            "storage",
            args,
        )
    if e.errno == errno.EFBIG:  # SIGXFSZ is ignored in Python: the write fails instead
        _fail(
            f"a file grew past the file size limit this command runs under (`ulimit -f`){where}; run it under "
            "a larger limit (`ulimit -f unlimited`) and the same command again (a run store stays resumable)",
            EXIT_USAGE,
            "storage",
            args,
        )
    _fail(f"{e.strerror or e}{where}", EXIT_USAGE, "os", args)


def main(argv: list[str] | None = None) -> None:
    """Entry point: MugraphErrors become one line on stderr and exit status 2, never a traceback;
    warnings are one line each. A `--json` event stream that ends without `done` ends with `error`."""
    warnings.formatwarning = warning_line
    json_stream.reset()
    output_complete(False)
    if threading.current_thread() is threading.main_thread():
        install_interrupt_handlers()
        take_hangup_as_term()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # not click's `main`: on an interrupt it writes an empty line before the command's one line
        with cli.make_context("mugraph", args) as top:
            cli.invoke(top)
        sys.stdout.flush()  # a closed stdout is said here, not as an ignored exception at the exit
    except StdoutClosed:
        click.echo(f"mugraph: stdout was closed, so the run stopped; {how_to_resume(fresh=_fresh(args))}", err=True)
        _stdout_closed()
    except (KeyboardInterrupt, click.exceptions.Abort):
        # Every `with` block (store, memo server, cluster) has closed on the way here.
        _fail(_interrupted_line(args), EXIT_INTERRUPTED, "interrupted", args)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if isinstance(e, click.UsageError) and ctx is not None else ""
        _fail(f"{e.format_message()}{hint}", EXIT_USAGE, "usage", args)
    except MugraphError as e:
        text = command_line_text(str(e))  # the options, not the library's arguments
        _fail(" | ".join(part.strip() for part in text.splitlines() if part.strip()), EXIT_USAGE, "input", args)
    except OSError as e:
        _os_error(e, args)
    except Exception as e:  # a fault of mugraph: its traceback follows, after the stream's last event
        json_stream.close_with_error(f"internal error: {type(e).__name__}: {e}", 1, "internal", args)
        raise
    finally:
        if argv is not None:  # a host process (a test calling `main`) takes its interrupts again
            output_complete(False)
