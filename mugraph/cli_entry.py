"""The `mugraph` console command: the interrupt handlers go in before the command line's modules are
imported (a few seconds: Dask, Z3, NumPy), so Ctrl-C or SIGTERM at any instant is one line and 130."""

from __future__ import annotations


def main() -> None:
    from mugraph.pipeline.interrupts import install_interrupt_handlers

    install_interrupt_handlers()
    from mugraph.cli import main as run  # an interrupt in here reaches the excepthook: one line, 130

    run()
