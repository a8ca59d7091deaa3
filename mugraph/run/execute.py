"""A prepared run carried out: its store opened (a PyTorch model's exported program staged beside it
first), the memo and the cluster started, the driver run with the live page fed, and the run's
neighbours written at the end (the report, the kernels, the expert's line)."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mugraph.dashboards import live
from mugraph.dashboards.report import write_report
from mugraph.ir.errors import MugraphError
from mugraph.ir.plural import counted, noun
from mugraph.programs import Program
from mugraph.run.expert import expert_line, stored_experts
from mugraph.run.kernels import kernels_check_command, write_store_module
from mugraph.run.mismatch import held_by, setting_changes
from mugraph.run.options import OptimizeOptions
from mugraph.run.outcome import finished, stored_done
from mugraph.run.prepare import Prepared, preflight, prepare
from mugraph.run.resume import how_to_resume
from mugraph.run.setup import main_not_rerun, say_key_of_its_own, staged_exported, versions, workers_memo_url
from mugraph.stages.layout.emitted import model_for
from mugraph.storage.memo.url import redact_url
from mugraph.storage.run.backends import open_store
from mugraph.storage.run.errors import OtherProgram, StoreMismatch
from mugraph.storage.run.paths import RunPaths
from mugraph.storage.run.protocol import RunStoreWriter
from mugraph.storage.run.recorded_command import is_model_command

if TYPE_CHECKING:
    from distributed import Client

    from mugraph.pipeline.events import DoneEvent, Event

EventSink = Callable[["Event"], None]


def run_optimize(
    program: Program | str,
    options: OptimizeOptions | None = None,
    on_event: EventSink | None = None,
) -> DoneEvent:
    """Search every fragment of `program` (a Program, or a built-in name or file as the command takes it)
    on a Dask cluster, confirm, rank and stitch the best μGraphs into a Zarr store; the same call on the
    same store continues where a stopped one left off. `on_event` gets every event as the run goes
    (start, progress, found, confirmed, layout, measured) and, last, the `done` event, with `report`
    and `kernels` (paths or None) added, which is also the return value. A store that holds the
    finished result already is read back without a cluster: `on_event` gets its `done` alone, as
    `mugraph optimize --json` prints it and `mugraph.optimize` sends it."""
    t0 = time.perf_counter()
    run = prepare(program, options)
    stored = reused(run, t0)
    done = stored if stored is not None else run_prepared(run, on_event)
    if on_event is not None:  # a caller that follows the events sees the end, a store read back too
        on_event(done)
    return done


def reused(run: Prepared, t0: float) -> DoneEvent | None:
    """The answer a finished store already holds for this run, read without a cluster, where nothing is
    asked that only a run does (`OptimizeOptions.reuses_finished`); None where the run must go on."""
    model = model_for(run.program.from_torch).name
    fragments = [(fp.spec.name, fp.payload.digest) for fp in run.plan.fragments]
    if not (run.options.reuses_finished() and finished(run.store, run.plan.identity, run.gpu.name, model, fragments)):
        return None
    done = stored_done(run.store, t0)
    done["expert"] = _expert(run, done)
    return done


def run_prepared(run: Prepared, on_event: EventSink | None = None) -> DoneEvent:
    """`run_optimize` once its options are checked and its plan made (`prepare`)."""
    preflight(run)
    say_key_of_its_own(run.options.memo_url, run.options.scheduler, run.store)
    try:
        with contextlib.ExitStack() as stack:
            st = _open_store(stack, run)
            url = stack.enter_context(workers_memo_url(run.options.memo_url, run.store))
            stack.enter_context(main_not_rerun())
            client = _start_cluster(stack, run, url)
            done = _drive(run, st, client, on_event, url)
    except KeyboardInterrupt as e:  # a library caller sees it under the traceback (the command line says its own)
        e.add_note(f"mugraph: interrupted; {how_to_resume(fresh=run.options.fresh, call=True)}")
        raise
    return _written_beside(run, done)


def _open_store(stack: contextlib.ExitStack, run: Prepared) -> RunStoreWriter:
    """The run's store, opened (made, resumed or, with `fresh`, made again, its old report removed). What
    the store alone does not hold (a PyTorch model's exported program) is written before a new store is
    made, so that the store records its digest (which `load` checks)."""
    from mugraph.pipeline.driver import COUNTER_NAMES

    o = run.options
    # no password or memo secret of a URL on the command line is kept in the store
    command = [redact_url(a) for a in (o.command if o.command is not None else sys.argv[1:])]
    meta: dict[str, Any] = {"versions": versions(), "command": command, "cwd": os.getcwd()}  # where its files are
    staged = stack.enter_context(staged_exported(run.program, run.store))
    if staged is not None:
        meta[staged.key] = staged.record()
    try:
        st = stack.enter_context(
            open_store(run.store, run.plan.identity, meta=meta, counter_names=COUNTER_NAMES, fresh=o.fresh)
        )
    except OtherProgram as e:
        raise e.described(held_by(run.store)) from None
    except StoreMismatch as e:
        changes = setting_changes(run.store, run.plan)
        if not changes:
            raise
        raise StoreMismatch(f"{e} (the search settings that differ: {'; '.join(changes)})") from None
    if o.fresh:  # the report beside it described the run just deleted, whether or not this one ends
        RunPaths(run.store).report.unlink(missing_ok=True)
    if staged is not None:
        staged.place(st.meta)
    st.put_experts(stored_experts(run.program, len(run.plan.fragments)))  # what `show` and the report mark
    return st


def _start_cluster(stack: contextlib.ExitStack, run: Prepared, memo_url: str | None) -> Client:
    """The Dask client (a local cluster's, or the given scheduler's) with the workers' plugin in."""
    from mugraph.pipeline.cluster import dask_client
    from mugraph.pipeline.worker import MugraphPlugin

    o = run.options
    client = stack.enter_context(dask_client(o.workers, o.scheduler, o.dashboard_address))
    register_plugin(client, MugraphPlugin(memo_url, o.backend), o.scheduler)
    if o.scheduler is not None and memo_url is not None:
        _say_workers_without_secret(client)
    return client


def _say_workers_without_secret(client: Client) -> None:
    """One warning where workers of a cluster started elsewhere lack the memo secret: each says so in its
    own log, which the user of this command may never read. Best effort: a worker that cannot answer
    shows itself in the run."""
    from mugraph.pipeline.cluster import call_within
    from mugraph.pipeline.worker import memo_without_secret

    try:
        answers = call_within(PLUGIN_TIMEOUT, client.run, memo_without_secret, on_error="return")
    except Exception:
        return
    n = sum(1 for a in answers.values() if a is True)
    if n:
        warnings.warn(
            f"{n} of {counted(len(answers), 'worker')} {noun(n, 'has', 'have')} no memo secret in "
            f"{noun(n, 'its', 'their')} environment ($MUGRAPH_MEMO_KEY) and {noun(n, 'keeps', 'keep')} "
            f"a memo of {noun(n, 'its', 'their')} own: the same results, found more slowly "
            "(docs/cluster-security.md)",
            RuntimeWarning,
            stacklevel=2,
        )


PLUGIN_TIMEOUT = 120.0  # seconds for every worker to take mugraph's plugin (a local one takes under 1)


def register_plugin(client: Client, plugin: Any, scheduler: str | None, timeout: float = PLUGIN_TIMEOUT) -> None:
    """Mugraph's worker plugin on every worker, or one error that says what a cluster's machines lack: a
    scheduler that cannot import mugraph answered with a traceback, and one whose worker could not
    hung the run with no output (the worker stops; the registration waits on it)."""
    from mugraph.pipeline.cluster import call_within

    where = f"the Dask cluster at {scheduler}" if scheduler else "the local Dask cluster"
    need = "every worker and the scheduler need mugraph installed, the version this command runs"
    try:
        call_within(timeout, client.register_plugin, plugin, name="mugraph")
    except TimeoutError:
        raise MugraphError(
            f"{where} did not start mugraph on its workers within {timeout:g} s; {need} (a worker's log says why)"
        ) from None
    except Exception as e:  # what the scheduler or a worker raised, sent back as text
        raise MugraphError(f"{where} could not start mugraph on its workers ({str(e)[:200]}); {need}") from None


def _drive(
    run: Prepared, st: RunStoreWriter, client: Client, on_event: EventSink | None, memo_url: str | None
) -> DoneEvent:
    """The driver's run, every event also published to the live page (whose URL the start event gets)."""
    from distributed import performance_report

    from mugraph.pipeline.cluster import dashboard_link
    from mugraph.pipeline.driver import Driver
    from mugraph.pipeline.worker import worker_environment

    o = run.options
    page = live.install(client) if dashboard_link(client) else None  # the page is part of the dashboard

    def emit(e: Event) -> None:
        live.publish(client, e)
        if e["event"] == "start":
            e["live_page"] = page
        if on_event is not None:
            on_event(e)

    # distributed's performance_report is unannotated
    perf = performance_report(filename=str(o.profile)) if o.profile else contextlib.nullcontext()  # type: ignore[no-untyped-call]
    with perf:
        done = Driver(
            run.plan,
            st,
            client,
            time_limit=run.time_limit,
            on_event=emit,
            profile=run.gpu,
            io=run.io,
            measure=o.measure,
            worker_env=worker_environment(memo_url),
        ).run()
    # How a stopped run goes on, said once for the page, the library and the command line: a library
    # call (`run_optimize`, or `mugraph.optimize`'s model) is called again, a command line run again.
    library = o.command is None or is_model_command(o.command)
    done["resume"] = None if done["complete"] else how_to_resume(fresh=o.fresh, call=library)
    live.publish(client, done)  # before the client closes: the page says how the run ended
    return done


def _written_beside(run: Prepared, done: DoneEvent) -> DoneEvent:
    """The `done` event with what the run wrote beside its store: the report, the kernels (`--emit`),
    Dask's profile, and the line on the program's expert."""
    o = run.options
    done["profile"] = str(o.profile) if o.profile else None
    done["report"] = _report_written(run.store)
    done["kernels"] = done["kernels_note"] = done["kernels_check"] = None
    if o.emit_kernels:
        program = None if run.program.from_torch else run.program  # a model is checked by `mugraph.load`
        kernels, done["kernels_note"] = write_store_module(run.store, program)
        done["kernels"] = str(kernels)
        done["kernels_check"] = kernels_check_command(run.store, o.command)
    done["expert"] = _expert(run, done)
    return done


def _report_written(store: Path) -> str | None:
    """The report written beside the store; None, said in one warning, where the disk refuses it (full,
    read-only): the run's result is in the store whatever becomes of its report, and the command that
    writes it later is named."""
    try:
        return str(write_report(store))
    except OSError as e:
        warnings.warn(
            f"the run's report was not written ({e.strerror or e}); its result is complete in the store: "
            f"`mugraph report {shlex.quote(str(store))}` writes the report once there is room",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def _expert(run: Prepared, done: DoneEvent) -> str | None:
    """The line on the program's expert: found among the run's μGraphs, or why not."""
    fragments = [(fp.payload.reference, fp.config) for fp in run.plan.fragments]
    return expert_line(run.program, fragments, set(done["mugraphs"]), complete=done["complete"])
