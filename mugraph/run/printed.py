"""A run as `mugraph optimize` shows it: the console's start and progress lines on stderr as the
events come, and on stdout either every event as one JSON line (`--json`, the `done` event last) or,
at the end, the verdict. The command only turns its flags into options and hands over its `echo`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mugraph.dashboards.console import verdict_lines
from mugraph.ir.together import outside_words
from mugraph.ir.types import NON_LAX_OPS
from mugraph.pipeline.interrupts import StdoutClosed, held, output_complete
from mugraph.programs import Program
from mugraph.run.execute import reused, run_prepared
from mugraph.run.options import OptimizeOptions
from mugraph.run.outcome import Console
from mugraph.run.prepare import prepare

if TYPE_CHECKING:
    from mugraph.pipeline.events import DoneEvent, Event
    from mugraph.run.prepare import Prepared


def run_printed(
    program: Program | str,
    options: OptimizeOptions,
    *,
    as_json: bool,
    echo: Callable[[str], None],
    exiting: bool = False,
) -> DoneEvent:
    """`run_optimize` with the command line's output, `echo` writing stdout's lines; the `done` event.
    The `history` event (earlier invocations' samples, for the live page) is not printed. A finished
    store that already holds the answer is read back without starting a cluster. `exiting`: the caller
    only returns and exits once the result is printed (the command line), so an interrupt from then on
    changes nothing (`interrupts.output_complete`)."""
    console = Console(verbose=True)

    def emit(e: Event) -> None:
        if as_json and e["event"] not in ("done", "history"):
            try:
                echo(json.dumps(e))
            except BrokenPipeError:  # the reader went away: stop as an interrupt stops the run
                raise StdoutClosed from None
        console.event(e)

    t0 = time.perf_counter()
    run = prepare(program, options)
    stored = reused(run, t0)
    if stored is not None:
        console.reused(stored)
        done = stored
    else:
        try:
            done = run_prepared(run, emit)
        except KeyboardInterrupt as e:
            # after the whole result was stored (the cluster closing, the report written): it stands
            finished = None if isinstance(e, StdoutClosed) else _stored_result(run, t0)
            if finished is None or not finished["complete"]:
                raise
            console.finished_anyway(finished)
            done = finished
        finally:
            console.close()
    try:
        with held():  # the result is printed whole; an interrupt meanwhile changes nothing
            if as_json:
                echo(json.dumps(done))
            else:
                for line in verdict_lines(done, done["gpu_profile"], _outside(run)) + _model_notes(run.program, done):
                    echo(line)
            output_complete(exiting)  # within the hold: no interrupt slips in between
    except KeyboardInterrupt as e:
        if isinstance(e, StdoutClosed):
            raise
        console.finished_anyway(done)
    return done


def _stored_result(run: Prepared, t0: float) -> DoneEvent | None:
    """The finished result the store holds (None where it holds none, or cannot be read now: then the
    interrupt is said as any other)."""
    try:
        return reused(run, t0)
    except Exception:
        return None


def _outside(run: Prepared) -> str:
    """What no fragment of the run's program holds, as the verdict names it (nothing, for a program
    whose fragments hold every op): the ops between fragments, and a PyTorch model's glue."""
    between = [op.kind.value for glue in run.plan.split.glue for op in glue.graph.ops if op.kind in NON_LAX_OPS]
    return outside_words(run.program.glue, between, run.program.from_torch)


def _model_notes(program: Program, done: DoneEvent) -> list[str]:
    """A PyTorch model's notes, as `mugraph.optimize`'s verdict gives them: heavy ops it leaves to
    PyTorch, and every fragment keeping the model's own ops."""
    if not program.from_torch:
        return []
    from mugraph.torch.verdict import glue_notes

    refs = done["reference"]
    all_kept = bool(refs) and all(done["best_per_fragment"].get(f) == row["digest"] for f, row in refs.items())
    return [f"  note: {n}" for n in glue_notes(program.heavy_glue, all_kept)]
