"""The `mugraph` command line: `app` (the command group, the commands of one module each, and how
errors become one line), `pipeline` (optimize), `status` (status, report), `show`, `emit` and
`explain`. A run itself (its options and their checks, its plan, store and cluster) is `mugraph.run`'s;
the command line only turns flags into its options and prints.

This module stays light: the console command installs its interrupt handlers before the command
line's modules are imported (a few seconds: Dask, Z3, NumPy), so Ctrl-C, SIGTERM or SIGHUP at any
instant is one line and exit 130."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The console command (`mugraph`, `python -m mugraph`, `python -m mugraph.cli`)."""
    from mugraph.cli.hangup import take_hangup_as_term
    from mugraph.pipeline.interrupts import exit_once_finished, install_interrupt_handlers

    install_interrupt_handlers()
    take_hangup_as_term()
    from mugraph.cli.app import main as run  # an interrupt in here reaches the excepthook: one line, 130

    run(argv)
    if argv is None:  # the process's own command line, done: what is left is the interpreter's exit
        exit_once_finished()
