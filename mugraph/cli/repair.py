"""`mugraph repair STORE`: a damaged run store's intact records kept, the rest dropped or rebuilt, so
that `mugraph optimize` resumes it (the work is `mugraph.storage.run.repair`'s)."""

from __future__ import annotations

import errno
from pathlib import Path

import click

from mugraph.cli.options import store_argument
from mugraph.cli.records import json_line
from mugraph.ir.errors import MugraphError
from mugraph.run.stored_checks import final_program_judge
from mugraph.storage.run.errors import StoreBusy
from mugraph.storage.run.repair import repair_store


@click.command()
@store_argument
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
@click.option(
    "--program",
    default=None,
    metavar="FILE",
    help="For a STORE made from a program file (.py): that file, run to check the final record's program "
    "against (a program file a store names is never run unless named here).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def repair(store: Path, dry_run: bool, program: str | None, as_json: bool) -> None:
    """Keep every intact record of a damaged run STORE and drop or rebuild the damaged ones, so that
    the same `mugraph optimize` resumes it and ends with the result of an undamaged run.

    Prints one line per damaged record, then what it did. The final record's program is run beside
    the program it was made for (as `emit` does before it writes it out): one that does not compute it
    is dropped, and the resumed run stitches it again; where that program cannot be had (a program
    file not named with --program) a note says so and the exit status is 2. Damage to the task table,
    the fragments or the root cannot be repaired: one line says so (exit 2) and the store is left as
    it is."""
    try:
        report = repair_store(store, dry_run=dry_run, judge=final_program_judge(program))
    except StoreBusy as e:  # repair has no --store to choose: the store is the one named
        raise StoreBusy(
            f"run store {store} is in use by a running mugraph process (pid {e.holder}); a live run's store is "
            "not read for repair, not even with --dry-run: wait for the run to end or stop it, then run "
            "repair again",
            e.holder,
        ) from None
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise MugraphError(
            f"cannot repair {store}: {e.strerror} ({e.filename}); repair locks the store before it reads it, "
            "--dry-run too (a live run's store is never read for repair): copy it somewhere writable and repair "
            "the copy"
        ) from None
    if as_json:
        click.echo(json_line(report.record()))
    else:
        for line in report.lines():
            click.echo(line)
    if report.notes:  # what `emit` refuses may be left: the note says what to pass
        raise SystemExit(2)
