"""A run as `mugraph optimize` shows it: the console's start and progress lines on stderr as the
events come, and on stdout either every event as one JSON line (`--json`, the `done` event last) or,
at the end, the verdict. The command only turns its flags into options and hands over its `echo`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from mugraph.dashboards.console import verdict_lines
from mugraph.programs import Program
from mugraph.run.execute import run_optimize
from mugraph.run.options import OptimizeOptions
from mugraph.run.outcome import Console

if TYPE_CHECKING:
    from mugraph.pipeline.events import DoneEvent, Event


def run_printed(
    program: Program | str, options: OptimizeOptions, *, as_json: bool, echo: Callable[[str], None]
) -> DoneEvent:
    """`run_optimize` with the command line's output, `echo` writing stdout's lines; the `done` event.
    The `history` event (earlier invocations' samples, for the live page) is not printed."""
    console = Console(verbose=True)

    def emit(e: Event) -> None:
        if as_json and e["event"] not in ("done", "history"):
            echo(json.dumps(e))
        console.event(e)

    try:
        done = run_optimize(program, options, emit)
    finally:
        console.close()
    if as_json:
        echo(json.dumps(done))
    else:
        for line in verdict_lines(done, done["gpu_profile"]):
            echo(line)
    return done
